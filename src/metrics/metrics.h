// Run metrics on rank 0: metrics.jsonl (one flushed JSON object per log or eval event), optional TensorBoard
// scalars in <run_dir>/tb, and a progress display on stderr (a bar on a terminal, plain log lines otherwise).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "config/settings.h"
#include "metrics/tensorboard.h"

namespace ft::metrics {

struct MetricsOptions {
  bool tensorboard = false;       // also write <run_dir>/tb/events.out.tfevents.*
  Progress progress = Progress::kAuto;  // auto (bar when stderr is a TTY) | on | off (plain lines)
  int64_t total_steps = 0;        // for the bar and the ETA

  static MetricsOptions from_config(const Config& cfg, int64_t total_steps);  // logging.tensorboard / progress
};

class MetricsLogger {
 public:
  // Creates run_dir and opens metrics.jsonl for appending (a resumed run continues the file).
  // Throws ft::ConfigError on a bad progress value, ft::Error when the files cannot be created.
  MetricsLogger(const std::filesystem::path& run_dir, const MetricsOptions& opts);
  ~MetricsLogger();
  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;

  // Appends {"event": event, "step": step, "time": unix seconds, ...fields} to metrics.jsonl and flushes;
  // every numeric field also goes to TensorBoard as "<event>/<key>" (e.g. "train/loss", "eval/loss").
  void log(const std::string& event, int64_t step, const nlohmann::json& fields);

  // The log interval's progress for `step` (1-based count of finished optimizer steps) with the optional fields
  // "loss", "lr", "grad_norm", "tokens_per_s" of `fields`: one log line (train.log and the console, where it scrolls
  // above the bar), and the bar's fields from now on.
  void progress(int64_t step, const nlohmann::json& fields);
  // Every step: redraws the bar (step/total, the last logged fields, elapsed, ETA), fitted to the terminal's width
  // at that moment, at most ~5 times a second and at the last step. No-op without a bar.
  void tick(int64_t step);
  // Leaves the last bar on screen and ends its line, so later log lines follow it (called by the destructor too).
  void finish();

  bool bar_active() const { return use_bar_; }
  const std::filesystem::path& jsonl_path() const { return jsonl_path_; }
  const TensorBoardWriter* tensorboard() const { return tb_.get(); }

 private:
  std::filesystem::path jsonl_path_;
  std::ofstream jsonl_;
  std::unique_ptr<TensorBoardWriter> tb_;
  MetricsOptions opts_;
  bool use_bar_ = false;
  bool bar_drawn_ = false;
  nlohmann::json last_fields_ = nlohmann::json::object();  // of the last progress() call, shown by the bar
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_draw_{};
  std::optional<std::pair<int64_t, std::chrono::steady_clock::time_point>> first_;  // step and time of the first call

  double eta_at(int64_t step, std::chrono::steady_clock::time_point now);  // seconds left; < 0 when unknown
  double elapsed() const;                                                  // seconds since this logger started
};

// The progress text (without the bar), e.g. "step 12/100 | loss 2.3456 | lr 3.00e-04 | 1234 tok/s | ETA 1:23".
// eta_s < 0 leaves the ETA out, elapsed_s < 0 the elapsed time ("| 0:42 elapsed"). Exposed for tests.
std::string format_progress(int64_t step, int64_t total, const nlohmann::json& fields, double eta_s,
                            double elapsed_s = -1.0);
// The bar drawn before the progress text: "[#####.....]  50%" for `step` of `total`.
std::string format_bar(int64_t step, int64_t total, int width = 24);
// The bar's whole line for a terminal `columns` wide: format_bar and the progress text, at most columns - 1
// characters (a full last column wraps on some terminals). When narrow it drops, in this order, the gradient
// norm, the elapsed time, the learning rate, tokens/s, the ETA and the loss, and shortens the bar.
std::string format_status(int64_t step, int64_t total, const nlohmann::json& fields, double eta_s, double elapsed_s,
                          int columns);
// "1:02:03" / "2:03" for seconds.
std::string format_duration(double seconds);

}  // namespace ft::metrics
