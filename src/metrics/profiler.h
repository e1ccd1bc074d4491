// train.profile_start_step: a Kineto trace (CPU ops and CUDA kernels) of a few optimizer steps, written as
// Chrome/Perfetto JSON to <run>/profile/trace-rank<R>-steps<A>-<B>.json (open in ui.perfetto.dev or
// chrome://tracing), as torchtune's profiler does.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <filesystem>

namespace ft::metrics {

class StepProfiler {
 public:
  // first_step 0 = off. Steps are 1-based optimizer steps, as in metrics.jsonl.
  StepProfiler(int64_t first_step, int64_t steps, std::filesystem::path dir, int64_t rank, c10::Device device);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  void before_step(int64_t step);  // starts tracing before the first traced step
  void after_step(int64_t step);   // writes the trace after the last traced step (the device is synchronised)

 private:
  int64_t first_, last_;
  std::filesystem::path dir_;
  int64_t rank_;
  c10::Device device_;
  bool active_ = false;
};

}  // namespace ft::metrics
