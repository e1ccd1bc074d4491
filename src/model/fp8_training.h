// Full fine-tuning with FP8 GEMMs (train.fp8), as torchao's float8 training recipes compute them (torchao 0.18,
// float8_linear.py: matmul_with_hp_or_float8_args; config.py: Float8LinearRecipeName). A trainable projection keeps
// its weight in its own dtype (bf16, or F32 master weights under autocast, which both recipes cast as they are, as
// torchao does); each step its three GEMMs cast their operands to FP8 with dynamic scales (quant/fp8_cast.h) and
// multiply them with a scaled FP8 GEMM:
//   y  = x W^T:   x scaled per row (token),  W per row (output feature)         [tensorwise: one scale each]
//   dx = dy W:    dy per row (token),        W per column (input feature)
//   dW = dy^T x:  dy per column (output),    x per column (input feature)
// tensorwise: e4m3 for x and W, e5m2 for dy, one scale per tensor, so the backward GEMMs read the forward's codes
// transposed; rowwise: e4m3 throughout, power-of-two scales along each GEMM's reduced dimension. The forward GEMM
// accumulates fast (as torchao's gemm_config_output), the backward ones do not.
//
// The fast path (our cast kernels and at::_scaled_mm) runs where the policy has our kernels, the GPU has FP8 tensor
// cores (sm_89+), the compute dtype is BF16 and every size is a multiple of 16; elsewhere the same casts run through
// ATen and the GEMMs through quant::fp8_scaled_gemm_reference (F32), forward and backward alike.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/settings.h"
#include "model/kernel_policy.h"
#include "quant/fp8_cast.h"

namespace ft::model {

class Transformer;

// x [..., in] times weight^T ([out, in], trainable): [..., out] in the compute dtype (autocast's, else the weight's).
// `weight_amax` (F32 [] on the weight's device, or undefined): the weight's amax as the optimizer step that wrote it
// computed it (quant::KnownAmax); tensorwise casts of F32 weights on the fast path then skip their amax pass.
at::Tensor fp8_training_linear(const at::Tensor& x, const at::Tensor& weight, Fp8Training recipe,
                               const KernelPolicy& policy, const at::Tensor& weight_amax = {});
// The same for projections that read one x (q/k/v, gate/up): [..., out_i] per weight, each equal to its own
// fp8_training_linear (every weight keeps its own scales), with x cast to FP8 once for all of them, forward and
// backward, instead of once per weight. `weight_amax`: one per weight (or none), as fp8_training_linear's.
std::vector<at::Tensor> fp8_training_linears(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                                             Fp8Training recipe, const KernelPolicy& policy,
                                             const std::vector<at::Tensor>& weight_amax = {});

// The gated MLP down(act(x Wg^T) * (x Wu^T)) as one op, for MLPs whose projections all train with tensorwise FP8
// and no bias: the SwiGLU kernels write the amax of h = act(gate) * up and of the gate and up gradients beside those
// tensors, so their casts skip the amax pass (a second read of the layer's largest activations). The same bits as
// the separate ops. `gate_up`: {Wg, Wu}, or {Wgu} (one joint weight, gate rows first); x [..., in]; returns
// [..., hidden]. Available with our kernels on the fast path of every weight (FP8 GPU, BF16 GEMMs, sizes multiples of
// 16). `weight_amax`: one per weight of gate_up, then down's (or none), as fp8_training_linear's.
bool fp8_mlp_available(const at::Tensor& x, const std::vector<at::Tensor>& gate_up, const at::Tensor& down,
                       const KernelPolicy& policy);
at::Tensor fp8_training_mlp(const at::Tensor& x, const std::vector<at::Tensor>& gate_up, const at::Tensor& down,
                            bool gelu_tanh, const KernelPolicy& policy,
                            const std::vector<at::Tensor>& weight_amax = {});

// The decoder layers that train.fp8_edge_layers keeps in bf16: `edge` at each end of `num_layers`, ascending (all of
// them when 2 * edge >= num_layers). The first and last layers are where FP8's rounding moved (b)'s loss most: with
// them in bf16 the loss on real text stayed within 0.7 % of bf16's over 300 steps, against 1.9 % (docs/benchmarks.md).
std::vector<int64_t> fp8_edge_layers(int64_t num_layers, int64_t edge);

// Which projections train.fp8 leaves in bf16: those of the `edge_layers` at each end (fp8_edge_layers), those whose
// path contains one of `skip` (by name, as torchao's module_filter_fn is mostly used) and those with fewer than
// `min_features` input or output features (by size: a GEMM with a small side gains less from FP8 than its casts cost;
// torchao's auto filter skips, e.g., weights [out <= 4096, in <= 1024] under tensorwise scaling on H100s).
struct Fp8Selection {
  std::vector<std::string> skip;
  int64_t edge_layers = 1;
  int64_t min_features = 0;
};

// Marks the decoder's projections for FP8 training with `recipe`, except those `selection` leaves in bf16 and those
// with a size that is no multiple of 16 (the FP8 GEMMs need it). Returns the paths left in bf16 outside the edge
// layers.
std::vector<std::string> enable_fp8_training(Transformer& model, Fp8Training recipe, const Fp8Selection& selection);

// Where the optimizer is to write each tensorwise FP8-trained weight's amax beside its step (made by
// enable_fp8_training; optim::AdamW::write_amax_into), by parameter name: the projection's path + ".weight".
std::map<std::string, std::shared_ptr<quant::KnownAmax>> fp8_weight_amax_sinks(const Transformer& model);

// The casts' CUDA glue (kernels/fp8_cast.h, in fp8_kernels.cpp; no_kernels.cpp stands in), on contiguous 2-D BF16 or
// F32 CUDA tensors (F32: master weights, cast as they are, as torchao casts them), bit for bit quant/fp8_cast.h's (see
// the kernels' header for the one power-of-two edge). Whether `device` has FP8 tensor cores (sm_89+) in a build with
// our kernels.
bool fp8_tensor_cores(at::Device device);
// quant::cast_fp8_tensorwise(x, format) in both layouts, written in one pass after the amax: `codes_t` [cols, rows
// rounded up to 16] holds x^T's codes, zero past rows (the GEMMs that reduce over rows need a multiple of 16); cols a
// multiple of 4.
struct Fp8TwoLayouts {
  quant::Fp8Scaled scaled;  // codes [rows, cols], inverse []
  at::Tensor codes_t;       // [cols, round_up(rows, 16)], the same scale
};
// `known_amax` (F32 [] on x's device, or undefined): x's amax as the kernel that wrote x computed it beside x; the cast
// then skips its own amax pass.
Fp8TwoLayouts fp8_cast_tensorwise_both_cuda(const at::Tensor& x, quant::Fp8Format format,
                                            const at::Tensor& known_amax = {});
// quant::cast_fp8_rowwise(x, format, pow2 = true); x BF16 or F32.
quant::Fp8Scaled fp8_cast_rows_cuda(const at::Tensor& x, quant::Fp8Format format);
// quant::cast_fp8_rowwise(x^T, format, pow2 = true), without the transposed copy; x BF16 or F32, sizes multiples of 4.
quant::Fp8Scaled fp8_cast_columns_cuda(const at::Tensor& x, quant::Fp8Format format);

}  // namespace ft::model
