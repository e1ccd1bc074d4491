// The stand-in for kahan_kernel.cpp in a build without our CUDA kernels: the kernel takes no parameter, so
// AdamW keeps its ATen composite.
#include "optim/kahan_kernel.h"
#include "util/error.h"

namespace ft::optim {

bool kahan_kernel_takes(const at::Tensor&, const AdamWState&) {
  return false;
}

void kahan_kernel_step(const at::Tensor&, AdamWState&, const KahanHyper&, const std::optional<at::Tensor>&,
                       const std::optional<at::Tensor>&) {
  throw Error("AdamW Kahan kernel: this build has no CUDA kernels",
              "set train.fused_kernels=false or rebuild with nvcc");
}

}  // namespace ft::optim
