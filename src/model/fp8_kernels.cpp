// The glue of kernels/fp8.h (builds with the kernels; no_kernels.cpp stands in elsewhere).
#include <ATen/cuda/CUDAContext.h>

#include "kernels/fp8.h"
#include "kernels/fp8_cast.h"
#include "model/fp8_linear.h"
#include "model/fp8_training.h"
#include "model/kernel_dtype.h"

namespace ft::model {

bool fp8_tensor_cores(at::Device device) {
  if (!device.is_cuda()) return false;
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device.index());
  return prop->major > 8 || (prop->major == 8 && prop->minor >= 9);  // Ada, Hopper and later
}

bool fp8_gemm_available(at::Device device, at::ScalarType dtype, const quant::Fp8Tensor& w) {
  if (!device.is_cuda() || dtype != at::kBFloat16 || w.data.device() != device) return false;
  // _scaled_mm needs the reduced and the output dimension in multiples of 16, both ways.
  if (w.rows() % 16 != 0 || w.cols() % 16 != 0 || !w.data.is_contiguous()) return false;
  return fp8_tensor_cores(device);
}

quant::Fp8Tensor fp8_quantize_rows_cuda(const at::Tensor& x, const at::Tensor& col_scale) {
  FT_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous() && kernel_supports(x.scalar_type()),
           "fp8_quantize_rows_cuda: x must be a contiguous 2-D F32/BF16/F16 CUDA tensor");
  FT_CHECK(!col_scale.defined() || (col_scale.scalar_type() == at::kFloat && col_scale.is_contiguous() &&
                                    col_scale.numel() == x.size(1) && col_scale.device() == x.device()),
           "fp8_quantize_rows_cuda: col_scale must be F32 [cols] on x's device");
  quant::Fp8Tensor q;
  q.data = at::empty(x.sizes(), x.options().dtype(at::kFloat8_e4m3fn));
  q.scale = at::empty({x.size(0)}, x.options().dtype(at::kFloat));
  kernels::fp8_quantize_rows(x.const_data_ptr(), kernel_dtype(x.scalar_type()),
                             col_scale.defined() ? col_scale.const_data_ptr<float>() : nullptr, x.size(0), x.size(1),
                             static_cast<uint8_t*>(q.data.data_ptr()), q.scale.data_ptr<float>(), stream_of(x));
  return q;
}

at::Tensor fp8_transpose_cuda(const at::Tensor& codes) {
  FT_CHECK(codes.is_cuda() && codes.dim() == 2 && codes.is_contiguous() && codes.element_size() == 1 &&
               codes.size(0) % 4 == 0 && codes.size(1) % 4 == 0,
           "fp8_transpose_cuda: codes must be contiguous 1-byte [rows, cols] on CUDA, both multiples of 4");
  at::Tensor out = at::empty({codes.size(1), codes.size(0)}, codes.options());
  kernels::transpose_bytes(static_cast<const uint8_t*>(codes.const_data_ptr()), codes.size(0), codes.size(1),
                           static_cast<uint8_t*>(out.data_ptr()), stream_of(codes));
  return out;
}

namespace {

kernels::Fp8Code code_of(quant::Fp8Format format) {
  return format == quant::Fp8Format::kE4m3 ? kernels::Fp8Code::kE4m3 : kernels::Fp8Code::kE5m2;
}

void check_cast_input(const at::Tensor& x, const char* op) {
  FT_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous() &&
               (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat) && x.numel() > 0,
           std::string(op) + ": x must be a contiguous 2-D BF16 or F32 CUDA tensor with elements");
}

// x, or a copy where x starts off the `bytes` grid the kernel's vector loads need (a view into the middle of a
// storage may).
at::Tensor aligned(const at::Tensor& x, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(x.const_data_ptr()) % bytes == 0 ? x : x.clone();
}

uint8_t* bytes_of(at::Tensor& codes) {
  return static_cast<uint8_t*>(codes.data_ptr());
}

}  // namespace

Fp8TwoLayouts fp8_cast_tensorwise_both_cuda(const at::Tensor& x_in, quant::Fp8Format format,
                                            const at::Tensor& known_amax) {
  FT_CHECK(x_in.is_cuda() && x_in.dim() == 2 && x_in.is_contiguous() &&
               (x_in.scalar_type() == at::kBFloat16 || x_in.scalar_type() == at::kFloat) && x_in.numel() > 0,
           "fp8_cast_tensorwise_both_cuda: x must be a contiguous 2-D BF16 or F32 CUDA tensor with elements");
  FT_CHECK(x_in.size(1) % 4 == 0, "fp8_cast_tensorwise_both_cuda: cols must be a multiple of 4");
  FT_CHECK(!known_amax.defined() || (known_amax.scalar_type() == at::kFloat && known_amax.numel() == 1 &&
                                     known_amax.device() == x_in.device()),
           "fp8_cast_tensorwise_both_cuda: the known amax must be one F32 on x's device");
  // The kernels load 16 bytes at a time (32 of F32).
  const bool f32 = x_in.scalar_type() == at::kFloat;
  const at::Tensor x = aligned(x_in, f32 ? 32 : 16);
  const int64_t rows = x.size(0), cols = x.size(1), ld_t = (rows + 15) / 16 * 16;
  const auto fp8 = x.options().dtype(quant::fp8_dtype(format));
  Fp8TwoLayouts q{{at::empty({rows, cols}, fp8), at::empty({}, x.options().dtype(at::kFloat))},
                  at::empty({cols, ld_t}, fp8)};
  at::Tensor amax = known_amax.defined() ? known_amax : at::empty({}, q.scaled.inverse.options());
  kernels::fp8_cast_tensorwise_both(x.const_data_ptr(), f32, rows, cols, code_of(format), amax.data_ptr<float>(),
                                    known_amax.defined(), bytes_of(q.scaled.codes), bytes_of(q.codes_t), ld_t,
                                    q.scaled.inverse.data_ptr<float>(), stream_of(x));
  return q;
}

quant::Fp8Scaled fp8_cast_rows_cuda(const at::Tensor& x, quant::Fp8Format format) {
  check_cast_input(x, "fp8_cast_rows_cuda");
  quant::Fp8Scaled q{at::empty(x.sizes(), x.options().dtype(quant::fp8_dtype(format))),
                     at::empty({x.size(0)}, x.options().dtype(at::kFloat))};
  kernels::fp8_cast_rows_pow2(x.const_data_ptr(), x.scalar_type() == at::kFloat, x.size(0), x.size(1), code_of(format),
                              bytes_of(q.codes), q.inverse.data_ptr<float>(), stream_of(x));
  return q;
}

quant::Fp8Scaled fp8_cast_columns_cuda(const at::Tensor& x_in, quant::Fp8Format format) {
  check_cast_input(x_in, "fp8_cast_columns_cuda");
  FT_CHECK(x_in.size(0) % 4 == 0 && x_in.size(1) % 4 == 0, "fp8_cast_columns_cuda: sizes must be multiples of 4");
  const at::Tensor x = aligned(x_in, x_in.scalar_type() == at::kFloat ? 16 : 8);  // 4 elements per load
  quant::Fp8Scaled q{at::empty({x.size(1), x.size(0)}, x.options().dtype(quant::fp8_dtype(format))),
                     at::empty({x.size(1)}, x.options().dtype(at::kFloat))};
  at::Tensor amax = at::empty({x.size(1)}, q.inverse.options());
  kernels::fp8_cast_columns_pow2(x.const_data_ptr(), x.scalar_type() == at::kFloat, x.size(0), x.size(1),
                                 code_of(format), amax.data_ptr<float>(), bytes_of(q.codes),
                                 q.inverse.data_ptr<float>(), stream_of(x));
  return q;
}

}  // namespace ft::model
