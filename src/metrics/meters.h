// What the training loop sums between two log lines: steps, tokens, time and the loss, kept on the device so that
// adding a step never waits for the GPU. One log line reads the window's rates, then reset() starts the next.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ft::metrics {

// An objective's own metrics summed over its units (F32 [] device tensors), by the name they are logged under.
using MetricSums = std::vector<std::pair<std::string, at::Tensor>>;
// Adds `from` into `into` by position (the same objective names the same metrics in the same order every time);
// an empty `into` takes copies.
void add_metric_sums(MetricSums& into, const MetricSums& from);

// One optimizer step as the window counts it.
struct StepTotals {
  int64_t units = 0;          // what the loss is averaged over (target tokens, or preference pairs), all ranks
  int64_t target_tokens = 0;  // positions carrying loss, all ranks
  int64_t positions = 0;      // every processed position, all ranks
  at::Tensor loss_sum;        // F32 [] on the device, this rank's (not read here)
  MetricSums metric_sums;     // this rank's, on the device
  double seconds = 0.0;       // the step's wall time
  double data_wait_s = 0.0;   // of it, waiting for batches
};

class LogWindow {
 public:
  explicit LogWindow(at::Device device);

  void add_step(const StepTotals& step);
  void reset();

  int64_t steps() const { return steps_; }
  int64_t units() const { return units_; }
  int64_t target_tokens() const { return target_tokens_; }
  const MetricSums& metric_sums() const { return metric_sums_; }
  double data_wait_s() const { return data_wait_s_; }
  const at::Tensor& loss_sum() const { return loss_sum_; }  // F32 [] on the device
  double positions_per_s() const;                           // every processed position (torchtune's tokens/s)
  double target_tokens_per_s() const;                       // positions that carry loss
  double step_time_s() const;                               // mean over the window's steps

 private:
  int64_t steps_ = 0;
  int64_t units_ = 0;
  int64_t target_tokens_ = 0;
  int64_t positions_ = 0;
  double seconds_ = 0.0;
  double data_wait_s_ = 0.0;
  at::Tensor loss_sum_;  // F32 []
  MetricSums metric_sums_;
};

}  // namespace ft::metrics
