// The frozen expert weights of a mixture-of-experts layer kept quantized (model.quantize under LoRA): a stack
// [E, N, K] (experts.gate_up_proj or experts.down_proj) stored as NF4 or FP8 codes and dequantized to the compute
// dtype for each grouped GEMM, forward and backward, into a buffer the caching allocator hands back after the GEMM.
// Between GEMMs only the codes stay in memory: for Qwen3-30B-A3B about 15 GB of NF4 instead of 58 GB of bf16 experts.
//
// The formats, as for the projections (model/linear.h):
// - NF4: the whole stack quantized as one flat tensor with bitsandbytes' quantize_4bit (blocks of 64 along each
//   expert's rows, double-quantized absmax with one offset for the stack), i.e. what bitsandbytes gives for the 3-D
//   tensor. PEFT + bitsandbytes cannot quantize transformers 5's fused 3-D expert parameters, so no peer's weights
//   are to be matched bit for bit; the stack's codes are bitsandbytes' own for that tensor (tests/quant).
// - FP8: e4m3 codes [E N, K] with one scale per row, i.e. per output row of each expert, as torchao's per-row
//   float8 for each expert's weight.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "config/settings.h"
#include "model/kernel_policy.h"
#include "quant/fp8.h"
#include "quant/nf4.h"

namespace ft::model {

struct QuantizedExperts {
  std::vector<int64_t> shape;                   // [E, N, K]
  std::shared_ptr<const quant::Nf4Tensor> nf4;  // the stack's NF4 codes (shape [E, N, K]), or null
  std::shared_ptr<const quant::Fp8Tensor> fp8;  // codes [E N, K] and F32 scales [E N], or null
  at::ScalarType dtype = at::kFloat;            // the dtype the weight had: the GEMMs' outside autocast

  // The stack [E, N, K] in `dtype`: NF4 through our kernel where the policy and layout allow it, else the ATen
  // dequantization (the same bits).
  at::Tensor dequantize(at::ScalarType dtype, const KernelPolicy& policy) const;
  at::Device device() const;
  int64_t numel() const;
  int64_t storage_bytes() const;  // the codes and scales
};

// `w` [E, N, K] quantized on its device; `dtype` is the compute dtype it stands for. Throws ft::Error for another
// rank or for BaseQuantization::kNone.
QuantizedExperts quantize_experts(const at::Tensor& w, BaseQuantization format, at::ScalarType dtype);

// x [S, K] (rows sorted by expert, slices ending at `ends`) times each slice's dequantized expert weight transposed:
// [S, N] in `dtype`, through ops::grouped_gemm. Differentiable in x only; backward dequantizes again (nothing of
// the dense weight is kept for it), except after a recompute (model/recompute.h).
at::Tensor quantized_grouped_gemm(const at::Tensor& x, const std::shared_ptr<const QuantizedExperts>& w,
                                  const at::Tensor& ends, at::ScalarType dtype, const KernelPolicy& policy);

}  // namespace ft::model
