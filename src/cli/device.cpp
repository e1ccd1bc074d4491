#include "cli/device.h"

#include <ATen/Context.h>
#include <torch/cuda.h>

#include "util/error.h"

namespace ft {

c10::Device resolve_device(const DeviceSetting& device, int local_rank, const std::string& key) {
  const bool has_cuda = at::hasCUDA() && torch::cuda::device_count() > 0;
  const int visible = has_cuda ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (device.kind == DeviceSetting::Kind::kCpu) return c10::Device(c10::kCPU);
  if (device.kind == DeviceSetting::Kind::kAuto && !has_cuda) return c10::Device(c10::kCPU);
  const int index = device.index >= 0 ? device.index : local_rank;
  if (!has_cuda) {
    throw ConfigError(key + ": '" + device.str() + "' asks for a GPU but none is visible",
                      "use " + key + "=cpu, or check nvidia-smi and CUDA_VISIBLE_DEVICES");
  }
  if (index < 0 || index >= visible) {
    throw ConfigError(key + ": GPU " + std::to_string(index) + " is not visible (" + std::to_string(visible) +
                          " visible)",
                      "one process per GPU: launch at most as many processes per node as GPUs");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace ft
