#include "metrics/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "util/error.h"
#include "util/fmt.h"

namespace ft::metrics {
namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string format_duration(double seconds) {
  if (!(seconds >= 0.0) || !std::isfinite(seconds)) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02d}", s / 60, s % 60);
}

std::string format_progress(int64_t step, int64_t total, const nlohmann::json& fields, double eta_s, double elapsed_s) {
  std::string s = total > 0 ? fmt::format("step {}/{}", step, total) : fmt::format("step {}", step);
  auto num = [&](const char* key) -> std::optional<double> {
    if (fields.is_object() && fields.contains(key) && fields[key].is_number()) return fields[key].get<double>();
    return std::nullopt;
  };
  if (auto v = num("loss")) s += fmt::format(" | loss {:.4f}", *v);
  if (auto v = num("lr")) s += fmt::format(" | lr {:.2e}", *v);
  if (auto v = num("grad_norm")) s += fmt::format(" | gnorm {:.3f}", *v);
  if (auto v = num("tokens_per_s")) s += fmt::format(" | {:.0f} tok/s", *v);
  if (elapsed_s >= 0.0) s += " | " + format_duration(elapsed_s) + " elapsed";
  if (eta_s >= 0.0) s += " | ETA " + format_duration(eta_s);
  return s;
}

std::string format_bar(int64_t step, int64_t total, int width) {
  const double frac = total > 0 ? std::clamp(static_cast<double>(step) / static_cast<double>(total), 0.0, 1.0) : 0.0;
  const int filled = static_cast<int>(frac * width);
  return "[" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(width - filled), '.') +
         "] " + fmt::format("{:3.0f}%", frac * 100.0);
}

MetricsLogger::MetricsLogger(const std::filesystem::path& run_dir, const MetricsOptions& opts) : opts_(opts) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  jsonl_path_ = run_dir / "metrics.jsonl";
  jsonl_.open(jsonl_path_, std::ios::app);
  if (!jsonl_)
    throw Error("cannot open '" + jsonl_path_.string() + "' for writing", "check that the run directory is writable");
  if (opts.tensorboard) tb_ = std::make_unique<TensorBoardWriter>(run_dir / "tb");
  use_bar_ = opts.progress == Progress::kOn || (opts.progress == Progress::kAuto && ::isatty(STDERR_FILENO) == 1);
}

MetricsLogger::~MetricsLogger() {
  finish();
}

void MetricsLogger::log(const std::string& event, int64_t step, const nlohmann::json& fields) {
  const double now = unix_now();
  nlohmann::json line = {{"event", event}, {"step", step}, {"time", now}};
  if (fields.is_object())
    for (const auto& [key, value] : fields.items()) line[key] = value;
  // Non-finite floats are not JSON; write null so every line stays parseable.
  for (auto& [key, value] : line.items())
    if (value.is_number_float() && !std::isfinite(value.get<double>())) value = nullptr;
  jsonl_ << line.dump() << '\n';
  jsonl_.flush();
  if (!jsonl_) throw Error("write error on '" + jsonl_path_.string() + "'", "check free disk space");
  if (tb_) {
    if (fields.is_object())
      for (const auto& [key, value] : fields.items())
        if (value.is_number()) tb_->add_scalar(event + "/" + key, value.get<double>(), step, now);
    tb_->flush();
  }
}

std::string MetricsLogger::text(int64_t step, std::chrono::steady_clock::time_point now) {
  // The ETA from the rate since the first step this process saw (a resumed run does not count earlier steps).
  if (!first_) first_ = std::make_pair(step, now);
  double eta = -1.0;
  const int64_t done = step - first_->first;
  if (opts_.total_steps > 0 && done > 0) {
    const double per_step = std::chrono::duration<double>(now - first_->second).count() / static_cast<double>(done);
    eta = per_step * static_cast<double>(std::max<int64_t>(0, opts_.total_steps - step));
  }
  return format_progress(step, opts_.total_steps, last_fields_, eta,
                         std::chrono::duration<double>(now - start_).count());
}

void MetricsLogger::progress(int64_t step, const nlohmann::json& fields) {
  last_fields_ = fields.is_object() ? fields : nlohmann::json::object();
  const std::string line = text(step, std::chrono::steady_clock::now());
  if (!use_bar_) {
    FT_LOG_INFO("{}", line);
    return;
  }
  log::write_to_files(log::Level::kInfo, line);
  last_draw_ = {};  // show the new fields now
  tick(step);
}

void MetricsLogger::tick(int64_t step) {
  if (!use_bar_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool last = opts_.total_steps > 0 && step >= opts_.total_steps;
  if (!last && now - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = now;
  log::set_status(format_bar(step, opts_.total_steps) + " " + text(step, now));
  bar_drawn_ = true;
}

void MetricsLogger::finish() {
  if (!bar_drawn_) return;
  log::end_status();
  bar_drawn_ = false;
}

}  // namespace ft::metrics
