// Internals shared by the sweep runner's translation units (runner.cpp, runner_trial.cpp).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sweep/runner.h"
#include "sweep/state.h"

namespace ft::sweep::detail {

// The clock of the trials' wall times.
using Clock = std::chrono::steady_clock;

// Seconds from `a` to `b` (runner.cpp).
double seconds_between(Clock::time_point a, Clock::time_point b);
// `parts` with `sep` between them (runner.cpp).
std::string join(const std::vector<std::string>& parts, const std::string& sep);
// The trial's values as "key=value ...", "(base config)" without any (runner.cpp).
std::string values_text(const Trial& t);

// A trial whose child process runs.
struct Running {
  size_t trial = 0;  // into plan.trials
  pid_t pid = -1;
  std::optional<FileLock> lock;
  size_t slot = 0;
  TrialState state;
  Clock::time_point started;
  uintmax_t log_offset = 0;  // where this attempt's output begins in output.log
  bool prune = false;        // median stopping asked it to stop
  std::string prune_reason;
  int64_t checked_step = -1;  // the last step median stopping looked at
  int64_t step = 0;           // the last step logged, for the progress line
};

// Runs the trials as child processes: selection, scheduling, median stopping and progress (runner.cpp); starting
// one trial's child, recording its end and passing signals on (runner_trial.cpp).
class Supervisor {
 public:
  Supervisor(const Plan& plan, const RunOptions& options);

  int run();

 private:
  void select();
  void check_config_unchanged(const TrialPlan& tp);
  void setup_slots();
  std::string slots_text() const;
  void loop();
  bool start(size_t i, size_t slot);
  void end(Running& r, int status);
  void on_signal(int sig);
  void watch();
  std::string progress_text() const;
  std::optional<double> eta_s() const;
  void say(const std::string& line);
  void event(const std::string& line);
  void draw_progress();
  void finish_line();
  int conclude();

  const Plan& plan_;
  const RunOptions& options_;
  bool tty_ = false;
  bool drawn_ = false;  // a progress line is on the terminal's last line
  std::vector<std::string> gpus_;
  std::vector<std::vector<std::string>> slots_;  // each slot's GPU set (empty on the CPU)
  std::deque<size_t> queue_;
  std::vector<Running> running_;
  std::map<size_t, std::vector<std::pair<int64_t, double>>> finished_series_;  // median stopping's references
  std::vector<double> walls_;  // wall times of the trials finished in this run
  size_t selected_ = 0;
  size_t done_ = 0;
  size_t failed_ = 0;
  size_t elsewhere_ = 0;
  size_t interrupted_ = 0;
  int signals_ = 0;
  bool stopping_ = false;
};

}  // namespace ft::sweep::detail
