#include "metrics/profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include "util/error.h"
#include "util/fmt.h"

#ifdef FT_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace ft::metrics {
namespace {

namespace kineto = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

std::set<ActivityType> activities(c10::Device device) {
  std::set<ActivityType> out{ActivityType::CPU};
  if (device.is_cuda()) out.insert(ActivityType::CUDA);
  return out;
}

void synchronize(c10::Device device) {
#ifdef FT_WITH_CUDA
  if (device.is_cuda()) c10::cuda::device_synchronize();
#endif
  (void)device;
}

}  // namespace

StepProfiler::StepProfiler(int64_t first_step, int64_t steps, std::filesystem::path dir, int64_t rank,
                           c10::Device device)
    : first_(first_step), last_(first_step + steps - 1), dir_(std::move(dir)), rank_(rank), device_(device) {}

StepProfiler::~StepProfiler() {
  if (!active_) return;
  try {
    kineto::disableProfiler();  // a run that stops inside the traced steps leaves no half-written trace
  } catch (const std::exception& e) {
    FT_LOG_WARN("profiler: could not stop tracing: {}", e.what());
  }
}

void StepProfiler::before_step(int64_t step) {
  if (first_ <= 0 || step != first_ || active_) return;
  const ProfilerConfig config(ProfilerState::KINETO, /*report_input_shapes=*/true, /*profile_memory=*/false,
                              /*with_stack=*/false, /*with_flops=*/false, /*with_modules=*/false);
  kineto::prepareProfiler(config, activities(device_));
  synchronize(device_);
  kineto::enableProfiler(config, activities(device_));
  active_ = true;
  FT_LOG_INFO("profiler: tracing steps {}-{}", first_, last_);
}

void StepProfiler::after_step(int64_t step) {
  if (!active_ || step != last_) return;
  synchronize(device_);
  auto result = kineto::disableProfiler();
  active_ = false;
  std::filesystem::create_directories(dir_);
  const auto file = dir_ / fmt::format("trace-rank{}-steps{}-{}.json", rank_, first_, last_);
  result->save(file.string());
  FT_LOG_INFO("profiler: wrote {}", file.string());
}

}  // namespace ft::metrics
