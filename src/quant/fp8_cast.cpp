#include "quant/fp8_cast.h"

#include <string>

#include "util/error.h"

namespace ft::quant {
namespace {

constexpr double kAmaxFloor = 1e-12;  // torchao's EPS: an all-zero tensor gets a finite scale

void check_input(const at::Tensor& x, const char* op) {
  FT_CHECK(x.defined() && x.dim() == 2 && x.numel() > 0, std::string(op) + ": x must be 2-D with elements");
  const auto t = x.scalar_type();
  FT_CHECK(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf,
           std::string(op) + ": x must be F32, BF16 or F16, got " + c10::toString(t));
}

// scale = max / max(amax, 1e-12) in F64, then F32 (torchao's amax_to_scale).
at::Tensor scale_of(const at::Tensor& amax, Fp8Format format) {
  return (fp8_max(format) / amax.to(at::kDouble).clamp_min(kAmaxFloor)).to(at::kFloat);
}

at::Tensor codes_of(const at::Tensor& x, const at::Tensor& scale, Fp8Format format) {
  const double max = fp8_max(format);
  return (x.to(at::kFloat) * scale).clamp(-max, max).to(fp8_dtype(format));
}

}  // namespace

at::ScalarType fp8_dtype(Fp8Format f) {
  return f == Fp8Format::kE4m3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
}

float fp8_max(Fp8Format f) {
  return f == Fp8Format::kE4m3 ? 448.0f : 57344.0f;
}

at::Tensor KnownAmax::of(const at::Tensor& weight) const {
  return amax.defined() && weight._version() == version ? amax : at::Tensor();
}

Fp8Scaled cast_fp8_tensorwise(const at::Tensor& x, Fp8Format format) {
  check_input(x, "cast_fp8_tensorwise");
  const at::Tensor scale = scale_of(x.abs().max(), format);  // F32 []
  return {codes_of(x, scale, format), scale.reciprocal()};
}

Fp8Scaled cast_fp8_rowwise(const at::Tensor& x, Fp8Format format, bool pow2) {
  check_input(x, "cast_fp8_rowwise");
  at::Tensor scale = scale_of(x.abs().amax(1, /*keepdim=*/true), format);  // F32 [rows, 1]
  if (pow2) scale = at::exp2(at::floor(at::log2(scale)));
  return {codes_of(x, scale, format), scale.reciprocal().squeeze(1).contiguous()};
}

at::Tensor fp8_scaled_gemm_reference(const Fp8Scaled& a, const Fp8Scaled& b, at::ScalarType dtype) {
  FT_CHECK(a.codes.dim() == 2 && b.codes.dim() == 2 && a.codes.size(1) == b.codes.size(1),
           "fp8_scaled_gemm_reference: operands must be [rows_a, k] and [rows_b, k]");
  const at::Tensor prod = at::mm(a.codes.to(at::kFloat), b.codes.to(at::kFloat).t());  // F32 [rows_a, rows_b]
  const at::Tensor sa = a.inverse.dim() == 0 ? a.inverse : a.inverse.unsqueeze(1);
  const at::Tensor sb = b.inverse.dim() == 0 ? b.inverse : b.inverse.unsqueeze(0);
  return (prod * sa * sb).to(dtype);
}

}  // namespace ft::quant
