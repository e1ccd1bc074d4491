#include "quant/fp8.h"

#include <string>

#include "quant/float_types.h"
#include "util/error.h"

namespace ft::quant {
namespace {

void check_codes(const Fp8Tensor& q, const char* op) {
  FT_CHECK(q.data.defined() && q.data.dim() == 2 && q.data.scalar_type() == at::kFloat8_e4m3fn,
           std::string(op) + ": data must be F8E4M3FN [rows, cols]");
  FT_CHECK(q.scale.defined() && q.scale.dim() == 1 && q.scale.size(0) == q.data.size(0) &&
               q.scale.scalar_type() == at::kFloat && q.scale.device() == q.data.device(),
           std::string(op) + ": scale must be F32 [rows] on the data's device");
}

}  // namespace

Fp8Tensor quantize_fp8_rows(const at::Tensor& x) {
  FT_CHECK(x.defined() && x.dim() == 2 && x.size(0) > 0 && x.size(1) > 0,
           "quantize_fp8_rows: the tensor must be 2-D [rows, cols] with elements");
  FT_CHECK(
      is_supported_float(x.scalar_type()),
      std::string("quantize_fp8_rows: the tensor must be F32, BF16 or F16, got ") + c10::toString(x.scalar_type()));
  const at::Tensor amax = x.abs().amax(1, /*keepdim=*/true);  // [rows, 1] in x's dtype (exact: a max)
  // Divided in x's dtype, as torchao; a zero row keeps its zeros with scale 1.
  at::Tensor scale = (amax / kFp8E4m3Max).to(at::kFloat);  // F32 [rows, 1]
  scale = at::where(amax.to(at::kFloat) > 0, scale, at::ones_like(scale));
  const at::Tensor codes =
      (x.to(at::kFloat) / scale).clamp(-kFp8E4m3Max, kFp8E4m3Max).to(at::kFloat8_e4m3fn);  // [rows, cols]
  return {codes, scale.squeeze(1).contiguous()};
}

at::Tensor dequantize_fp8_rows(const Fp8Tensor& q, at::ScalarType dtype) {
  check_codes(q, "dequantize_fp8_rows");
  FT_CHECK(is_supported_float(dtype), "dequantize_fp8_rows: dtype must be F32, BF16 or F16");
  return (q.data.to(at::kFloat) * q.scale.unsqueeze(1)).to(dtype);  // [rows, cols]
}

at::Tensor fp8_gemm_reference(const Fp8Tensor& a, const Fp8Tensor& b, at::ScalarType dtype) {
  check_codes(a, "fp8_gemm_reference");
  check_codes(b, "fp8_gemm_reference");
  FT_CHECK(a.cols() == b.cols(), "fp8_gemm_reference: a and b differ in their reduced dimension");
  const at::Tensor prod = at::mm(a.data.to(at::kFloat), b.data.to(at::kFloat).t());  // F32 [rows_a, rows_b]
  return (prod * a.scale.unsqueeze(1) * b.scale.unsqueeze(0)).to(dtype);
}

}  // namespace ft::quant
