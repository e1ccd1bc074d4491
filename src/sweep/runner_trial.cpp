// One trial's `finetune train` child: starting it (the trial's lock, argv, environment and output log), recording
// how it ended, and passing signals on to the children.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "ckpt/checkpoint_store.h"
#include "metrics/metrics.h"
#include "sweep/runner_internal.h"
#include "sweep/summary.h"
#include "util/file_writer.h"
#include "util/fmt.h"
#include "util/process.h"

namespace fs = std::filesystem;

namespace ft::sweep {
namespace {

std::string hostname() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return host;
}

// The tail of `path` from byte `offset` (at most the last 64 KiB of it).
std::string read_from(const fs::path& path, uintmax_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uintmax_t>(in.tellg());
  uintmax_t start = std::min(offset, size);
  if (size - start > 65536) start = size - 65536;
  in.seekg(static_cast<std::streamoff>(start));
  std::string text(static_cast<size_t>(size - start), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  return text;
}

}  // namespace

namespace detail {

bool Supervisor::start(size_t i, size_t slot) {
  const TrialPlan& tp = plan_.trials[i];
  auto lock = try_lock_trial(tp.dir);
  if (!lock) {
    ++elsewhere_;
    say(fmt::format("trial {} (#{}) is running in another process; skipped", tp.trial.name, i));
    return false;
  }
  Running r;
  r.trial = i;
  r.slot = slot;
  r.state = read_state(tp.dir);
  if (done(r.state.status)) {  // finished by another process between our look and the lock
    ++done_;
    return false;
  }
  const bool resume = !ckpt::CheckpointStore::list(tp.dir).empty();
  // Without a checkpoint the run starts over: an earlier attempt's metrics would mix into its curves.
  std::error_code ec;
  if (!resume && fs::exists(tp.dir / "metrics.jsonl", ec)) {
    fs::rename(tp.dir / "metrics.jsonl", tp.dir / fmt::format("metrics.attempt-{}.jsonl", r.state.attempts), ec);
  }
  config::write_resolved_config(tp.loaded, tp.dir);

  std::vector<std::string> argv{options_.executable};
  if (!options_.log_level.empty()) argv.insert(argv.end(), {"--log-level", options_.log_level});
  argv.insert(argv.end(), {"train", "--config", (tp.dir / "config.yaml").string()});
  if (plan_.spec.devices_per_trial > 1) {
    argv.insert(argv.end(), {"--nproc-per-node", std::to_string(plan_.spec.devices_per_trial)});
  }
  std::map<std::string, std::string> env;
  std::string devices, env_text;
  if (!slots_[slot].empty()) {
    devices = join(slots_[slot], ",");
    env["CUDA_VISIBLE_DEVICES"] = devices;
  } else if (slots_.size() > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) {
    // As torchrun does: trials sharing the cores should not each start one thread per core.
    const unsigned cores = std::max(1U, std::thread::hardware_concurrency());
    const unsigned share = static_cast<unsigned>(slots_.size() * static_cast<size_t>(plan_.spec.devices_per_trial));
    env["OMP_NUM_THREADS"] = std::to_string(std::max(1U, cores / share));
  }
  for (const auto& [key, value] : env) env_text += " " + key + "=" + value;

  const fs::path log_path = tp.dir / "output.log";
  const UniqueFd log_fd(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  const int fd = log_fd.get();
  if (fd < 0) throw_io_error("cannot open the trial's output log", log_path, errno);
  r.log_offset = fs::file_size(log_path, ec);
  ++r.state.attempts;
  process::write_all(fd, fmt::format("=== finetune sweep: trial {} (#{}), attempt {} on {}:{} {} ===\n", tp.trial.name,
                                     i, r.state.attempts, hostname(), env_text, join(argv, " ")));
  r.pid = process::spawn(options_.executable, argv, process::environment(env), fd, fd);
  r.lock = std::move(lock);
  r.started = Clock::now();
  r.state.status = Status::kRunning;
  r.state.started = unix_now();
  r.state.host = hostname();
  r.state.pid = r.pid;
  r.state.exit_code = 0;
  r.state.error.clear();
  write_state(tp.dir, r.state);
  running_.push_back(std::move(r));
  event(fmt::format("{} trial {} (#{}): {}{}", resume ? "resuming" : "starting", tp.trial.name, i,
                    values_text(tp.trial), devices.empty() ? "" : " on GPU " + devices));
  return true;
}

void Supervisor::end(Running& r, int status) {
  const TrialPlan& tp = plan_.trials[r.trial];
  const double wall = seconds_between(r.started, Clock::now());
  r.state.wall_s += wall;
  r.state.pid = 0;
  r.state.exit_code = process::exit_code(status);
  if (!process::failed(status)) {
    r.state.status = Status::kFinished;
    ++done_;
    walls_.push_back(wall);
    const TrialMetrics m = read_trial_metrics(tp.dir / "metrics.jsonl");
    const auto best = best_of(metric_series(m, plan_.spec.metric), plan_.spec.mode);
    event(fmt::format("finished trial {} (#{}) in {}{}", tp.trial.name, r.trial, metrics::format_duration(wall),
                      best ? fmt::format(": {} {:.4g}", plan_.spec.metric, *best) : ""));
  } else if (r.prune) {
    r.state.status = Status::kPruned;
    r.state.error = r.prune_reason;
    ++done_;
    event(fmt::format("stopped trial {} (#{}) early: {}", tp.trial.name, r.trial, r.prune_reason));
  } else if (stopping_) {
    r.state.status = Status::kInterrupted;
    ++interrupted_;
    event(fmt::format("trial {} (#{}) {}; the next run resumes it from its newest checkpoint", tp.trial.name, r.trial,
                      process::describe_status(status)));
  } else {
    r.state.status = Status::kFailed;
    std::string why = process::last_error_line(read_from(tp.dir / "output.log", r.log_offset));
    if (WIFSIGNALED(status))
      why = "finetune train " + process::describe_status(status) + (why.empty() ? "" : ": " + why);
    r.state.error = why.empty() ? "(no output)" : why;
    ++failed_;
    event(fmt::format("FAILED trial {} (#{}): {}; last error: {} (see {})", tp.trial.name, r.trial,
                      process::describe_status(status), r.state.error, (tp.dir / "output.log").string()));
  }
  write_state(tp.dir, r.state);
  r.lock.reset();
}

void Supervisor::on_signal(int sig) {
  ++signals_;
  if (!stopping_) {
    stopping_ = true;
    for (const auto& r : running_) ::kill(r.pid, sig);
    event(
        fmt::format("{}: stopping {} running trial{} (they save a checkpoint); no new trials start; a second "
                    "signal kills them",
                    ::strsignal(sig), running_.size(), running_.size() == 1 ? "" : "s"));
    return;
  }
  for (const auto& r : running_) {
    ::kill(-r.pid, SIGKILL);
    ::kill(r.pid, SIGKILL);
  }
  event(fmt::format("second signal: killed {} running trial{}", running_.size(), running_.size() == 1 ? "" : "s"));
}

}  // namespace detail
}  // namespace ft::sweep
