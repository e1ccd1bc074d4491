// The GEMM of a frozen NF4 weight (QLoRA's base, quant/nf4.h): the weight is dequantized to the compute dtype for
// each GEMM and dropped after it, forward and backward alike, so only the 4-bit codes stay in memory between them
// (as bitsandbytes' MatMul4Bit); only a checkpointed layer's recompute keeps the dense weight for the backward that
// follows it (model/recompute.h). The frozen weight gets no gradient; the input gets its gradient.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "model/kernel_policy.h"
#include "quant/nf4.h"

namespace ft::model {

// The row blocks of one weight: several NF4 weights [out_i, in] of one `in`, stacked into [sum out_i, in] (one
// projection, or a group of them that read one input: q/k/v, gate/up).
using Nf4Rows = std::vector<std::shared_ptr<const quant::Nf4Tensor>>;

// One NF4 weight of any shape in `dtype`: our kernel (kernels/nf4.h) on CUDA where the policy allows it and the
// layout fits, else quant::dequantize_nf4. Both give the same bits.
at::Tensor dequantize_weight(const quant::Nf4Tensor& q, at::ScalarType dtype, const KernelPolicy& policy);

// The stacked weight [sum out_i, in] in `dtype`: our kernel (kernels/nf4.h) on CUDA where the policy allows it and
// the layout fits, else quant::dequantize_nf4. Both give the same bits.
at::Tensor dequantize_rows(const Nf4Rows& rows, at::ScalarType dtype, const KernelPolicy& policy);

// x [..., in] times the stacked weight^T: [..., sum out_i], in the GEMM dtype (autocast's, else `weight_dtype`, the
// dtype the model's parameters have).
at::Tensor nf4_linear(const at::Tensor& x, const Nf4Rows& rows, at::ScalarType weight_dtype,
                      const KernelPolicy& policy);

// Whether this build's kernel can dequantize `q` (CUDA, sizes and blocks of whole 8-element groups), and the
// kernel itself, writing q's weight into `out` (contiguous, q's numel, on q's device, F32/BF16/F16).
bool nf4_dequantize_available(const quant::Nf4Tensor& q);
void nf4_dequantize_into(const quant::Nf4Tensor& q, at::Tensor& out);

}  // namespace ft::model
