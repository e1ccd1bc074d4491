// The GEMM of a frozen NF4 weight (QLoRA's base, quant/nf4.h): the weight is dequantized to the compute dtype for
// each GEMM and dropped after it, forward and backward alike, so only the 4-bit codes stay in memory between them
// (as bitsandbytes' MatMul4Bit); only a checkpointed layer's recompute keeps the dense weight for the backward that
// follows it (model/recompute.h). The frozen weight gets no gradient; the input gets its gradient.
//
// model.nf4_compute: fp8 runs the GEMMs in FP8 instead: the weight is dequantized to e4m3 codes with one scale per
// output row (what quant::quantize_fp8_rows makes of the F32 dequantized weight: NF4's 16 levels times a block's
// absmax need few of e4m3's bits), and the GEMMs are the FP8 base's (model/fp8_linear.h: x quantized per token;
// dy per row with W's row scales folded in). The backward dequantizes the codes again, transposed, so only the
// 4-bit codes and the row scales [out] live between the two. Our kernels and _scaled_mm on a GPU with FP8 tensor
// cores; the ATen quantization and the F32 reference GEMM elsewhere.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "config/settings.h"
#include "model/kernel_policy.h"
#include "quant/fp8.h"
#include "quant/nf4.h"

namespace ft::model {

class Transformer;

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
// dtype the model's parameters have), with GEMMs in that dtype or, by `compute`, in FP8.
at::Tensor nf4_linear(const at::Tensor& x, const Nf4Rows& rows, at::ScalarType weight_dtype, Nf4Compute compute,
                      const KernelPolicy& policy);

// Sets the GEMMs of the NF4 projections of `model` (MoE experts keep theirs in the compute dtype). FP8 GEMMs need
// sizes in multiples of 16 (nf4_fp8_gemm_sizes): returns the paths of the projections left in the compute dtype.
std::vector<std::string> set_nf4_compute(Transformer& model, Nf4Compute compute);
// Whether _scaled_mm takes the stacked weights' sizes both ways (out_i and in multiples of 16).
bool nf4_fp8_gemm_sizes(const Nf4Rows& rows);

// The stacked weight [sum out_i, in] as e4m3 codes with row scales: quant::quantize_fp8_rows of the F32
// dequantized weight, through our kernels (nf4_to_fp8_cuda, same bits) where the policy allows and they take it.
quant::Fp8Tensor nf4_to_fp8(const Nf4Rows& rows, const KernelPolicy& policy);

// Whether this build's kernel can dequantize `q` (CUDA, sizes and blocks of whole 8-element groups), and the
// kernel itself, writing q's weight into `out` (contiguous, q's numel, on q's device, F32/BF16/F16).
bool nf4_dequantize_available(const quant::Nf4Tensor& q);
void nf4_dequantize_into(const quant::Nf4Tensor& q, at::Tensor& out);
// Whether the FP8 kernels take the stacked weights (each as nf4_dequantize_available; one `in`; sizes multiples of
// 16), and the kernels: the codes [sum out_i, in] and row scales, and the same codes transposed, [in, sum out_i]
// (row-major), from those scales.
bool nf4_to_fp8_available(const Nf4Rows& rows);
quant::Fp8Tensor nf4_to_fp8_cuda(const Nf4Rows& rows);
at::Tensor nf4_to_fp8_transposed_cuda(const Nf4Rows& rows, const at::Tensor& scale);

}  // namespace ft::model
