#include "metrics/meters.h"

#include <algorithm>

namespace ft::metrics {

LogWindow::LogWindow(at::Device device)
    : loss_sum_(at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device))) {}

void LogWindow::add_step(int64_t target_tokens, int64_t positions, const at::Tensor& loss_sum, double seconds,
                         double data_wait_s) {
  ++steps_;
  target_tokens_ += target_tokens;
  positions_ += positions;
  loss_sum_ += loss_sum;
  seconds_ += seconds;
  data_wait_s_ += data_wait_s;
}

void LogWindow::reset() {
  steps_ = 0;
  target_tokens_ = 0;
  positions_ = 0;
  seconds_ = 0.0;
  data_wait_s_ = 0.0;
  loss_sum_.zero_();
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
