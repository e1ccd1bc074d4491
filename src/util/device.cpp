#include "util/device.h"

#include <ATen/Context.h>
#include <torch/cuda.h>

#include "util/error.h"

namespace ft {

c10::Device resolve_device(const std::string& spec, int local_rank) {
  const bool has_cuda = at::hasCUDA() && torch::cuda::device_count() > 0;
  const int visible = has_cuda ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (spec == "cpu") return c10::Device(c10::kCPU);
  if (spec == "auto" && !has_cuda) return c10::Device(c10::kCPU);
  int index = local_rank;
  if (spec.rfind("cuda:", 0) == 0) {
    try {
      index = std::stoi(spec.substr(5));
    } catch (const std::exception&) {
      throw ConfigError("run.device: '" + spec + "' is not a device", "use auto, cpu, cuda or cuda:N");
    }
  } else if (spec != "cuda" && spec != "auto") {
    throw ConfigError("run.device: '" + spec + "' is not a device", "use auto, cpu, cuda or cuda:N");
  }
  if (!has_cuda) {
    throw ConfigError("run.device: '" + spec + "' asks for a GPU but none is visible",
                      "use run.device=cpu, or check nvidia-smi and CUDA_VISIBLE_DEVICES");
  }
  if (index < 0 || index >= visible) {
    throw ConfigError("run.device: GPU " + std::to_string(index) + " is not visible (" + std::to_string(visible) +
                          " visible)",
                      "one process per GPU: launch at most as many processes per node as GPUs");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace ft
