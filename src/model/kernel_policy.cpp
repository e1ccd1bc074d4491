#include "model/kernel_policy.h"

namespace ft::model {

bool KernelPolicy::built_with_kernels() {
#ifdef FT_WITH_KERNELS
  return true;
#else
  return false;
#endif
}

KernelPolicy KernelPolicy::resolve(bool fused_kernels, at::Device device, at::ScalarType compute_dtype) {
  KernelPolicy p;
  p.device = device;
  p.compute_dtype = compute_dtype;
  p.fused = fused_kernels && device.is_cuda();
  p.group_gemms = p.fused;
  p.kernels = p.fused && built_with_kernels();
  if (!fused_kernels) {
    p.why_not = "train.fused_kernels is false";
  } else if (!device.is_cuda()) {
    p.why_not = "the run is on " + device.str() + ", the kernels need CUDA";
  } else if (!built_with_kernels()) {
    p.why_not = "this build has no CUDA kernels (no nvcc at build time)";
  }
  return p;
}

}  // namespace ft::model
