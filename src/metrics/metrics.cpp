#include "metrics/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "metrics/record.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::metrics {
namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

MetricsOptions MetricsOptions::from_config(const Config& cfg, int64_t total_steps) {
  MetricsOptions o;
  o.tensorboard = cfg.logging.tensorboard;
  o.progress = cfg.logging.progress;
  o.total_steps = total_steps;
  return o;
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0.0) || !std::isfinite(seconds)) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02d}", s / 60, s % 60);
}

namespace {

// One field of the progress text and how soon it goes when the line must be shorter (0: never).
struct ProgressPiece {
  int drop_order;
  std::string text;
};

// The progress text's fields in display order.
std::vector<ProgressPiece> progress_pieces(int64_t step, int64_t total, const nlohmann::json& fields, double eta_s,
                                           double elapsed_s) {
  std::vector<ProgressPiece> pieces;
  pieces.push_back({0, total > 0 ? fmt::format("step {}/{}", step, total) : fmt::format("step {}", step)});
  auto num = [&](const char* key) -> std::optional<double> {
    if (fields.is_object() && fields.contains(key) && fields[key].is_number()) return fields[key].get<double>();
    return std::nullopt;
  };
  if (auto v = num(kLoss)) pieces.push_back({1, fmt::format("loss {:.4f}", *v)});
  if (auto v = num(kRewardAccuracies)) pieces.push_back({4, fmt::format("acc {:.1f}%", 100.0 * *v)});
  if (auto v = num(kLr)) pieces.push_back({4, fmt::format("lr {:.2e}", *v)});
  if (auto v = num(kGradNorm)) pieces.push_back({6, fmt::format("gnorm {:.3f}", *v)});
  if (auto v = num(kTokensPerS)) pieces.push_back({3, fmt::format("{:.0f} tok/s", *v)});
  if (elapsed_s >= 0.0) pieces.push_back({5, format_duration(elapsed_s) + " elapsed"});
  if (eta_s >= 0.0) pieces.push_back({2, "ETA " + format_duration(eta_s)});
  return pieces;
}

// The pieces whose drop_order is at most `keep`, joined by " | ".
std::string join_pieces(const std::vector<ProgressPiece>& pieces, int keep) {
  std::string s;
  for (const auto& piece : pieces) {
    if (piece.drop_order > keep) continue;
    if (!s.empty()) s += " | ";
    s += piece.text;
  }
  return s;
}

}  // namespace

std::string format_progress(int64_t step, int64_t total, const nlohmann::json& fields, double eta_s, double elapsed_s) {
  return join_pieces(progress_pieces(step, total, fields, eta_s, elapsed_s), std::numeric_limits<int>::max());
}

std::string format_status(int64_t step, int64_t total, const nlohmann::json& fields, double eta_s, double elapsed_s,
                          int columns) {
  constexpr int kMaxBar = 24, kMinBar = 8;
  constexpr int kBarFrame = 8;  // "[", "] 100%" and the space after it
  const auto pieces = progress_pieces(step, total, fields, eta_s, elapsed_s);
  const int limit = std::max(columns - 1, 1);
  for (int keep = 6; keep >= 0; --keep) {
    const std::string text = join_pieces(pieces, keep);
    const int room = limit - kBarFrame - static_cast<int>(text.size());
    if (room >= kMinBar) return format_bar(step, total, std::min(kMaxBar, room)) + " " + text;
  }
  return join_pieces(pieces, 0).substr(0, static_cast<size_t>(limit));
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

double MetricsLogger::eta_at(int64_t step, std::chrono::steady_clock::time_point now) {
  // The rate since the first step this process saw (a resumed run does not count earlier steps).
  if (!first_) first_ = std::make_pair(step, now);
  const int64_t done = step - first_->first;
  if (opts_.total_steps <= 0 || done <= 0) return -1.0;
  const double per_step = std::chrono::duration<double>(now - first_->second).count() / static_cast<double>(done);
  return per_step * static_cast<double>(std::max<int64_t>(0, opts_.total_steps - step));
}

double MetricsLogger::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void MetricsLogger::progress(int64_t step, const nlohmann::json& fields) {
  last_fields_ = fields.is_object() ? fields : nlohmann::json::object();
  const double eta = eta_at(step, std::chrono::steady_clock::now());
  FT_LOG_INFO("{}", format_progress(step, opts_.total_steps, last_fields_, eta, elapsed()));
  last_draw_ = {};  // show the new fields now
  tick(step);
}

void MetricsLogger::tick(int64_t step) {
  if (!use_bar_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool last = opts_.total_steps > 0 && step >= opts_.total_steps;
  if (!last && now - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = now;
  log::set_status(
      format_status(step, opts_.total_steps, last_fields_, eta_at(step, now), elapsed(), log::console_columns()));
  bar_drawn_ = true;
}

void MetricsLogger::finish() {
  if (!bar_drawn_) return;
  log::end_status();
  bar_drawn_ = false;
}

}  // namespace ft::metrics
