// What the training loop sums between two log lines: steps, tokens, time and the loss, kept on the device so that
// adding a step never waits for the GPU. One log line reads the window's rates, then reset() starts the next.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace ft::metrics {

class LogWindow {
 public:
  explicit LogWindow(at::Device device);

  // One optimizer step: its target tokens and processed positions (all ranks), its loss sum (F32 [] on the
  // device, not read here), the seconds it took and the seconds of it spent waiting for data.
  void add_step(int64_t target_tokens, int64_t positions, const at::Tensor& loss_sum, double seconds,
                double data_wait_s);
  void reset();

  int64_t steps() const { return steps_; }
  int64_t target_tokens() const { return target_tokens_; }
  double data_wait_s() const { return data_wait_s_; }
  const at::Tensor& loss_sum() const { return loss_sum_; }  // F32 [] on the device
  double positions_per_s() const;                           // every processed position (torchtune's tokens/s)
  double target_tokens_per_s() const;                       // positions that carry loss
  double step_time_s() const;                               // mean over the window's steps

 private:
  int64_t steps_ = 0;
  int64_t target_tokens_ = 0;
  int64_t positions_ = 0;
  double seconds_ = 0.0;
  double data_wait_s_ = 0.0;
  at::Tensor loss_sum_;  // F32 []
};

}  // namespace ft::metrics
