// Which kernels a run uses, decided once (Trainer: from train.fused_kernels, the device and the precision) and
// read by the op entry points of model/ops.h and model/attention.h, which pick the CUDA kernel or the ATen
// composite from it. Nothing else in the model decides between them.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace ft::model {

struct KernelPolicy {
  // The fused paths: the varlen flash attention, at::_fused_rms_norm, the chunked linear + cross-entropy loss, and
  // our CUDA kernels where `kernels` allows them. resolve(): train.fused_kernels on a CUDA device.
  bool fused = false;
  // Our CUDA kernels (src/kernels: add + RMSNorm, RoPE, SwiGLU/GeGLU, soft-capped attention, short-piece
  // attention, adapter dropout, cross-entropy rows): `fused` in a build that has them (FT_WITH_KERNELS).
  bool kernels = false;
  // Projections that read one input (q/k/v, gate/up) as grouped GEMMs (linear_group), MoE experts as at::_grouped_mm
  // (ops::grouped_gemm); resolve(): `fused`. Pure ATen, so a test may set it on CPU.
  bool group_gemms = false;
  at::Device device = at::kCPU;               // the run's device
  at::ScalarType compute_dtype = at::kFloat;  // the run's GEMM dtype: autocast's, else the parameters'
  std::string why_not;                        // why `kernels` is off, for the log; empty when on

  // The policy of a run: train.fused_kernels, on `device`, computing in `compute_dtype`.
  static KernelPolicy resolve(bool fused_kernels, at::Device device, at::ScalarType compute_dtype);
  // Whether this build has our CUDA kernels.
  static bool built_with_kernels();

  // The fused ATen paths for a tensor (they need it on CUDA), and our kernels for it (each entry point still asks
  // its kernel whether it takes the tensors' shapes and dtypes).
  bool fused_for(const at::Tensor& t) const { return fused && t.is_cuda(); }
  bool kernels_for(const at::Tensor& t) const { return kernels && t.is_cuda(); }
  bool fused_for(at::Device d) const { return fused && d.is_cuda(); }
  bool kernels_for(at::Device d) const { return kernels && d.is_cuda(); }
};

}  // namespace ft::model
