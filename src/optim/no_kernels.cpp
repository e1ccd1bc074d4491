// The stand-in for step_kernels.cpp in a build without our CUDA kernels: the kernels take no parameter, so AdamW
// keeps its ATen composites.
#include "optim/step_kernels.h"
#include "util/error.h"

namespace ft::optim {
namespace {

[[noreturn]] void no_kernels(const char* what) {
  throw Error(std::string(what) + ": this build has no CUDA kernels",
              "set train.fused_kernels=false or rebuild with nvcc");
}

}  // namespace

bool f32_kernel_takes(const at::Tensor&, const AdamWState&) {
  return false;
}

void f32_kernel_step(const at::Tensor&, AdamWState&, const StepHyper&, const std::optional<at::Tensor>&,
                     const std::optional<at::Tensor>&, const at::Tensor&) {
  no_kernels("AdamW F32 kernel");
}

bool kahan_kernel_takes(const at::Tensor&, const AdamWState&) {
  return false;
}

void kahan_kernel_step(const at::Tensor&, AdamWState&, const StepHyper&, const std::optional<at::Tensor>&,
                       const std::optional<at::Tensor>&) {
  no_kernels("AdamW Kahan kernel");
}

bool eight_bit_kernel_takes(const at::Tensor&, const AdamWState&, const at::Tensor&) {
  return false;
}

void eight_bit_kernel_step(const at::Tensor&, AdamWState&, const at::Tensor&, const StepHyper&,
                           const std::optional<at::Tensor>&, const std::optional<at::Tensor>&) {
  no_kernels("AdamW 8-bit kernel");
}

}  // namespace ft::optim
