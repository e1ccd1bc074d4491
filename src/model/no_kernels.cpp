// The kernel wrappers of a build without our CUDA kernels (no nvcc at configure time): every kernel reports that
// it cannot take its tensors, so the entry points (model/ops.h, model/attention.h, model/linear.h) keep the ATen
// paths, and a direct call explains itself. Builds with the kernels compile norm.cpp, rope.cpp, swiglu.cpp,
// short_attention.cpp, softcap_attention.cpp, lora_dropout.cpp, nf4_dequantize.cpp, fp8_kernels.cpp, fp8_mlp.cpp,
// moe_rows.cpp and cross_entropy_rows.cpp instead (model/CMakeLists.txt).
#include "model/fp8_linear.h"
#include "model/fp8_training.h"
#include "model/linear_cross_entropy.h"
#include "model/lora_dropout.h"
#include "model/moe_rows.h"
#include "model/nf4_linear.h"
#include "model/norm.h"
#include "model/rope.h"
#include "model/short_attention.h"
#include "model/softcap_attention.h"
#include "model/swiglu.h"
#include "util/error.h"

namespace ft::model {
namespace {

[[noreturn]] void no_kernels(const char* op) {
  throw Error(std::string(op) + ": this build has no CUDA kernels",
              "set train.fused_kernels=false or rebuild with nvcc");
}

}  // namespace

bool add_rms_norm_available(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::ScalarType) {
  return false;
}
std::pair<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor&, const at::Tensor&, const at::Tensor&, double,
                                               at::ScalarType, double) {
  no_kernels("add_rms_norm");
}
at::Tensor fused_rms_norm(const at::Tensor&, const at::Tensor&, double, at::ScalarType, double) {
  no_kernels("fused_rms_norm");
}

bool moe_rows_available(const at::Tensor&, const at::Tensor&) {
  return false;
}
at::Tensor moe_dispatch_rows(const at::Tensor&, const ops::ExpertSlots&, int64_t) {
  no_kernels("moe_dispatch_rows");
}
at::Tensor moe_combine_rows(const at::Tensor&, const at::Tensor&, const ops::ExpertSlots&, int64_t) {
  no_kernels("moe_combine_rows");
}

bool nf4_dequantize_available(const quant::Nf4Tensor&) {
  return false;
}
void nf4_dequantize_into(const quant::Nf4Tensor&, at::Tensor&) {
  no_kernels("nf4_dequantize_into");
}
bool nf4_to_fp8_available(const Nf4Rows&) {
  return false;
}
quant::Fp8Tensor nf4_to_fp8_cuda(const Nf4Rows&) {
  no_kernels("nf4_to_fp8_cuda");
}
at::Tensor nf4_to_fp8_transposed_cuda(const Nf4Rows&, const at::Tensor&) {
  no_kernels("nf4_to_fp8_transposed_cuda");
}

bool fp8_gemm_available(at::Device, at::ScalarType, const quant::Fp8Tensor&) {
  return false;
}
bool fp8_tensor_cores(at::Device) {
  return false;
}
bool fp8_mlp_available(const at::Tensor&, const std::vector<at::Tensor>&, const at::Tensor&, const KernelPolicy&) {
  return false;
}
at::Tensor fp8_training_mlp(const at::Tensor&, const std::vector<at::Tensor>&, const at::Tensor&, bool,
                            const KernelPolicy&, const std::vector<at::Tensor>&) {
  no_kernels("fp8_training_mlp");
}
Fp8TwoLayouts fp8_cast_tensorwise_both_cuda(const at::Tensor&, quant::Fp8Format, const at::Tensor&) {
  no_kernels("fp8_cast_tensorwise_both_cuda");
}
quant::Fp8Scaled fp8_cast_rows_cuda(const at::Tensor&, quant::Fp8Format) {
  no_kernels("fp8_cast_rows_cuda");
}
quant::Fp8Scaled fp8_cast_columns_cuda(const at::Tensor&, quant::Fp8Format) {
  no_kernels("fp8_cast_columns_cuda");
}
quant::Fp8Tensor fp8_quantize_rows_cuda(const at::Tensor&, const at::Tensor&) {
  no_kernels("fp8_quantize_rows_cuda");
}
at::Tensor fp8_transpose_cuda(const at::Tensor&) {
  no_kernels("fp8_transpose_cuda");
}

bool fused_rope_available(const at::Tensor&, const at::Tensor&) {
  return false;
}
at::Tensor fused_rope_apply(const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  no_kernels("fused rope");
}

bool fused_swiglu_available(const at::Tensor&, const at::Tensor&) {
  return false;
}
at::Tensor fused_swiglu(const at::Tensor&, const at::Tensor&, bool) {
  no_kernels("fused swiglu");
}
at::Tensor fused_swiglu_joint(const at::Tensor&, bool) {
  no_kernels("fused swiglu");
}

bool short_attention_available(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t) {
  return false;
}
at::Tensor short_piece_attention(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, double) {
  no_kernels("short piece attention");
}

bool fused_softcap_available(const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  return false;
}
at::Tensor fused_softcapped_attention(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, bool,
                                      double, double) {
  no_kernels("fused soft-capped attention");
}

bool fused_lora_dropout_available(const at::Tensor&) {
  return false;
}
at::Tensor fused_lora_dropout_down(const at::Tensor&, const at::Tensor&, double) {
  no_kernels("fused adapter dropout");
}

bool fused_cross_entropy_rows_available(const at::Tensor&) {
  return false;
}
at::Tensor fused_cross_entropy_rows(at::Tensor&, const at::Tensor&, int64_t, bool) {
  no_kernels("fused cross-entropy");
}

}  // namespace ft::model
