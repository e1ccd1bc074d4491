#include "sweep/runner.h"

#include <torch/cuda.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "metrics/metrics.h"
#include "sweep/runner_internal.h"
#include "sweep/summary.h"
#include "util/error.h"
#include "util/fmt.h"
#include "util/process.h"
#include "util/signals.h"

namespace ft::sweep {
namespace detail {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s;
}

std::string values_text(const Trial& t) {
  std::vector<std::string> parts;
  for (const auto& a : t.values) parts.push_back(a.key + "=" + a.display);
  return parts.empty() ? "(base config)" : join(parts, " ");
}

}  // namespace detail

namespace {

using detail::Supervisor;

// The GPUs the trials can use: none when every trial runs on the CPU or no GPU is visible.
std::vector<std::string> visible_gpus(const Plan& plan) {
  const bool all_cpu = std::all_of(plan.trials.begin(), plan.trials.end(),
                                   [](const TrialPlan& t) {
                                     return t.loaded.config.run.device.kind == DeviceSetting::Kind::kCpu;
                                   });
  if (all_cpu) return {};
  const int count = static_cast<int>(torch::cuda::device_count());
  if (count <= 0) return {};
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  return visible_device_ids(env != nullptr ? env : "", count);
}

}  // namespace

namespace detail {

Supervisor::Supervisor(const Plan& plan, const RunOptions& options) : plan_(plan), options_(options) {
  tty_ = ::isatty(STDERR_FILENO) == 1;
}

int Supervisor::run() {
  write_record(plan_.dir, record_of(plan_));
  select();
  setup_slots();
  if (!queue_.empty()) {
    say(fmt::format("sweep {}: {} trial{} to run ({}), {} already done{}", plan_.dir.string(), queue_.size(),
                    queue_.size() == 1 ? "" : "s", slots_text(), done_,
                    failed_ > 0 ? fmt::format(", {} failed before (rerun them with --retry-failed)", failed_) : ""));
  }
  loop();
  finish_line();
  return conclude();
}

// Which trials this run starts, from their recorded state.
void Supervisor::select() {
  std::vector<size_t> chosen;
  if (options_.index) {
    const int i = *options_.index;
    if (i < 0 || static_cast<size_t>(i) >= plan_.trials.size()) {
      throw ConfigError(fmt::format("--index {}: the sweep has {} trials (indices 0 to {})", i, plan_.trials.size(),
                                    plan_.trials.size() - 1),
                        "`finetune sweep ... --list` prints them; size the job array to match");
    }
    chosen.push_back(static_cast<size_t>(i));
  } else {
    for (size_t i = 0; i < plan_.trials.size(); ++i) chosen.push_back(i);
  }
  selected_ = chosen.size();
  for (const size_t i : chosen) {
    const TrialPlan& tp = plan_.trials[i];
    const TrialState state = read_state(tp.dir);
    if (done(state.status)) {
      ++done_;
      if (options_.index) say(fmt::format("trial {} (#{}) is already {}", tp.trial.name, i, to_string(state.status)));
      check_config_unchanged(tp);
      continue;
    }
    if (state.status == Status::kFailed && !options_.retry_failed) {
      ++failed_;
      if (options_.index) {
        say(fmt::format("trial {} (#{}) failed before (exit code {}: {}); rerun it with --retry-failed", tp.trial.name,
                        i, state.exit_code, state.error));
      }
      continue;
    }
    if (locked_elsewhere(tp.dir)) {
      ++elsewhere_;
      say(fmt::format("trial {} (#{}) is running in another process (pid {} on {}); skipped", tp.trial.name, i,
                      state.pid, state.host));
      continue;
    }
    queue_.push_back(i);
  }
}

// A finished trial whose config the base config or overrides have changed since keeps its result.
void Supervisor::check_config_unchanged(const TrialPlan& tp) {
  std::ifstream in(tp.dir / "config.yaml");
  if (!in) return;
  std::stringstream text;  // not istreambuf_iterator: GCC 12 flags it as a null dereference at -O2
  text << in.rdbuf();
  std::string old = text.str();
  while (old.rfind('#', 0) == 0) {  // the header comment
    const size_t nl = old.find('\n');
    old.erase(0, nl == std::string::npos ? old.size() : nl + 1);
  }
  if (old != config::to_yaml(tp.loaded.config)) {
    say(
        fmt::format("warning: trial {} finished with a config that differs from today's; its result is kept "
                    "(delete {} to rerun it)",
                    tp.trial.name, tp.dir.string()));
  }
}

void Supervisor::setup_slots() {
  const int64_t per_trial = plan_.spec.devices_per_trial;
  const int64_t max_parallel = plan_.spec.max_parallel;
  if (options_.index) {
    slots_.assign(1, {});  // the scheduler chose this task's devices
    return;
  }
  gpus_ = visible_gpus(plan_);
  if (gpus_.empty()) {
    slots_.assign(static_cast<size_t>(max_parallel > 0 ? max_parallel : 1), {});
    return;
  }
  slots_ = device_slots(gpus_, per_trial, max_parallel);
}

std::string Supervisor::slots_text() const {
  if (options_.index) return "this task's devices";
  if (gpus_.empty())
    return slots_.size() == 1 ? "one at a time on the CPU" : fmt::format("{} at a time on the CPU", slots_.size());
  std::vector<std::string> sets;
  for (const auto& s : slots_) sets.push_back(join(s, ","));
  return fmt::format("{} at a time on GPUs {}", slots_.size(), join(sets, " | "));
}

void Supervisor::loop() {
  signals::Catcher catcher;
  std::vector<bool> busy(slots_.size(), false);
  auto last_tick = Clock::now() - std::chrono::seconds(10);
  while ((!queue_.empty() && !stopping_) || !running_.empty()) {
    for (size_t s = 0; s < slots_.size() && !queue_.empty() && !stopping_; ++s) {
      if (busy[s]) continue;
      const size_t trial = queue_.front();
      queue_.pop_front();
      if (start(trial, s)) busy[s] = true;
    }
    for (auto it = running_.begin(); it != running_.end();) {
      int status = 0;
      if (::waitpid(it->pid, &status, WNOHANG) != it->pid) {
        ++it;
        continue;
      }
      busy[it->slot] = false;
      Running ended = std::move(*it);
      it = running_.erase(it);
      end(ended, status);  // after the erase: the progress line no longer counts it as running
    }
    if (const int sig = catcher.take(); sig != 0) {
      // Two signals between two looks are two signals: the second kills.
      while (signals_ < catcher.count()) on_signal(sig);
    }
    if (Clock::now() - last_tick >= std::chrono::seconds(1)) {
      last_tick = Clock::now();
      watch();
      if (tty_) draw_progress();
    }
    ::poll(nullptr, 0, 100);
  }
}

// Reads the running trials' metrics: their step for the progress line, and median stopping.
void Supervisor::watch() {
  const auto& ms = plan_.spec.median_stop;
  std::vector<std::vector<std::pair<int64_t, double>>> finished;
  if (ms.enabled && !stopping_) {
    for (size_t i = 0; i < plan_.trials.size(); ++i) {
      const TrialPlan& tp = plan_.trials[i];
      auto cached = finished_series_.find(i);
      if (cached == finished_series_.end()) {
        if (read_state(tp.dir).status != Status::kFinished) continue;
        cached =
            finished_series_.emplace(i, metric_series(read_trial_metrics(tp.dir / "metrics.jsonl"), plan_.spec.metric))
                .first;
      }
      finished.push_back(cached->second);
    }
  }
  for (auto& r : running_) {
    const TrialPlan& tp = plan_.trials[r.trial];
    const TrialMetrics m = read_trial_metrics(tp.dir / "metrics.jsonl");
    if (!m.train.empty()) r.step = std::max(r.step, m.train.rbegin()->first);
    if (!ms.enabled || stopping_ || r.prune) continue;
    const auto series = metric_series(m, plan_.spec.metric);
    if (series.empty()) continue;
    const int64_t step = series.back().first;
    if (step <= r.checked_step || step < ms.warmup_steps) continue;
    r.checked_step = step;
    const auto mine = best_of(series, plan_.spec.mode);
    std::vector<double> others;
    for (const auto& f : finished) {
      std::vector<std::pair<int64_t, double>> upto;
      for (const auto& p : f) {
        if (p.first <= step) upto.push_back(p);
      }
      if (auto v = best_of(upto, plan_.spec.mode)) others.push_back(*v);
    }
    if (static_cast<int64_t>(others.size()) < ms.min_trials) continue;
    const double med = *median(others);
    if (!better(med, *mine, plan_.spec.mode)) continue;
    r.prune = true;
    r.prune_reason = fmt::format("at step {}, {} {:.4g} was worse than the median {:.4g} of {} finished trials", step,
                                 plan_.spec.metric, *mine, med, others.size());
    ::kill(r.pid, SIGTERM);
    event(fmt::format("median stopping trial {} (#{}): {}", tp.trial.name, r.trial, r.prune_reason));
  }
}

std::string Supervisor::progress_text() const {
  const size_t pending = queue_.size();
  std::string s = fmt::format("sweep: {}/{} done, {} running, {} failed", done_, selected_, running_.size(), failed_);
  if (pending > 0) s += fmt::format(", {} pending", pending);
  std::vector<std::string> steps;
  for (const auto& r : running_) {
    const int64_t total = plan_.trials[r.trial].loaded.config.train.max_steps;
    steps.push_back(fmt::format("{} step {}{}", plan_.trials[r.trial].trial.name, r.step,
                                total > 0 ? fmt::format("/{}", total) : ""));
  }
  if (!steps.empty()) s += " | " + join(steps, ", ");
  if (const auto eta = eta_s()) s += " | ETA " + metrics::format_duration(*eta);
  return s;
}

// Remaining time: trials' durations from those finished in this run, else extrapolated from the running ones'
// steps, spread over the slots.
std::optional<double> Supervisor::eta_s() const {
  const auto now = Clock::now();
  double per_trial = 0.0;
  if (!walls_.empty()) {
    for (const double w : walls_) per_trial += w;
    per_trial /= static_cast<double>(walls_.size());
  } else {
    int n = 0;
    for (const auto& r : running_) {
      const int64_t total = plan_.trials[r.trial].loaded.config.train.max_steps;
      if (total <= 0 || r.step <= 0) continue;
      per_trial += seconds_between(r.started, now) * static_cast<double>(total) / static_cast<double>(r.step);
      ++n;
    }
    if (n == 0) return std::nullopt;
    per_trial /= n;
  }
  double work = per_trial * static_cast<double>(queue_.size());
  for (const auto& r : running_) work += std::max(0.0, per_trial - seconds_between(r.started, now));
  return work / static_cast<double>(std::max<size_t>(1, std::min(slots_.size(), queue_.size() + running_.size())));
}

void Supervisor::say(const std::string& line) {
  std::string text = (tty_ && drawn_ ? "\r\033[K" : "") + std::string("finetune sweep: ") + line + "\n";
  process::write_all(STDERR_FILENO, text);
  drawn_ = false;
}

// A trial started or ended: a line, then the progress (redrawn on a terminal, one more line otherwise).
void Supervisor::event(const std::string& line) {
  say(line);
  if (tty_) {
    draw_progress();
  } else {
    process::write_all(STDERR_FILENO, "finetune " + progress_text() + "\n");
  }
}

void Supervisor::draw_progress() {
  if (running_.empty() && queue_.empty()) return;
  process::write_all(STDERR_FILENO, "\r\033[K" + progress_text());
  drawn_ = true;
}

void Supervisor::finish_line() {
  if (tty_ && drawn_) process::write_all(STDERR_FILENO, "\r\033[K");
  drawn_ = false;
}

int Supervisor::conclude() {
  if (!options_.index) {
    const SummaryFiles files = write_summary(plan_.dir, record_of(plan_));
    const auto rows = collect_rows(plan_.dir, record_of(plan_));
    say(fmt::format("{}; summary in {}{}", counts_text(rows), files.markdown.string(),
                    files.png.empty() ? "" : " and " + files.png.filename().string()));
    const auto best = std::find_if(rows.begin(), rows.end(), [](const Row& r) { return r.best; });
    if (best != rows.end()) {
      say(fmt::format("best: {} ({}): {} {:.6g}", best->trial.name, values_text(best->trial), plan_.spec.metric,
                      *best->metric));
    }
  }
  if (signals_ > 0) return static_cast<int>(ExitCode::kInterrupted);
  if (failed_ > 0 || elsewhere_ > 0 || interrupted_ > 0 || done_ < selected_) return 1;
  return 0;
}

}  // namespace detail

std::vector<std::vector<std::string>> device_slots(const std::vector<std::string>& gpus, int64_t per_trial,
                                                   int64_t max_parallel) {
  if (per_trial < 1 || per_trial > static_cast<int64_t>(gpus.size())) {
    throw ConfigError(fmt::format("devices_per_trial {} does not fit the {} visible GPU(s)", per_trial, gpus.size()),
                      "lower devices_per_trial in the sweep file, or run on a machine with more GPUs");
  }
  const size_t n = static_cast<size_t>(per_trial);
  size_t count = gpus.size() / n;
  if (max_parallel > 0) count = std::min(count, static_cast<size_t>(max_parallel));
  std::vector<std::vector<std::string>> slots;
  for (size_t s = 0; s < count; ++s) {
    slots.emplace_back(gpus.begin() + static_cast<std::ptrdiff_t>(s * n),
                       gpus.begin() + static_cast<std::ptrdiff_t>((s + 1) * n));
  }
  return slots;
}

std::vector<std::string> visible_device_ids(const std::string& text, int count) {
  std::vector<std::string> ids;
  size_t start = 0;
  while (!text.empty() && start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string id = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!id.empty()) ids.push_back(id);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (static_cast<int>(ids.size()) != count) {
    ids.clear();
    for (int i = 0; i < count; ++i) ids.push_back(std::to_string(i));
  }
  return ids;
}

std::optional<double> median(std::vector<double> values) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

int run_sweep(const Plan& plan, const RunOptions& options) {
  return Supervisor(plan, options).run();
}

}  // namespace ft::sweep
