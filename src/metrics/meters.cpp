#include "metrics/meters.h"

#include <algorithm>

#include "util/error.h"

namespace ft::metrics {

LogWindow::LogWindow(at::Device device)
    : loss_sum_(at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device))) {}

void add_metric_sums(MetricSums& into, const MetricSums& from) {
  if (into.empty()) {
    for (const auto& [name, value] : from) into.emplace_back(name, value.clone());
    return;
  }
  FT_CHECK(into.size() == from.size(), "add_metric_sums: the metrics changed between steps");
  for (size_t i = 0; i < from.size(); ++i) into[i].second += from[i].second;
}

void LogWindow::add_step(const StepTotals& step) {
  ++steps_;
  units_ += step.units;
  target_tokens_ += step.target_tokens;
  positions_ += step.positions;
  loss_sum_ += step.loss_sum;
  add_metric_sums(metric_sums_, step.metric_sums);
  seconds_ += step.seconds;
  data_wait_s_ += step.data_wait_s;
}

void LogWindow::reset() {
  steps_ = 0;
  units_ = 0;
  target_tokens_ = 0;
  positions_ = 0;
  seconds_ = 0.0;
  data_wait_s_ = 0.0;
  loss_sum_.zero_();
  metric_sums_.clear();
}

double LogWindow::positions_per_s() const {
  return static_cast<double>(positions_) / std::max(1e-9, seconds_);
}

double LogWindow::target_tokens_per_s() const {
  return static_cast<double>(target_tokens_) / std::max(1e-9, seconds_);
}

double LogWindow::step_time_s() const {
  return seconds_ / static_cast<double>(std::max<int64_t>(1, steps_));
}

}  // namespace ft::metrics
