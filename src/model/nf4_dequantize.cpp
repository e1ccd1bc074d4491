// The glue of kernels/nf4.h (builds with the kernels; no_kernels.cpp stands in elsewhere).
#include <algorithm>
#include <cstdint>

#include "kernels/nf4.h"
#include "model/kernel_dtype.h"
#include "model/nf4_linear.h"

namespace ft::model {
namespace {

const kernels::Nf4Tables& tables() {
  static const kernels::Nf4Tables values = [] {
    kernels::Nf4Tables t{};
    const at::Tensor code = quant::nf4_code().contiguous();        // F32 [16], CPU
    const at::Tensor dynamic = quant::dynamic_map().contiguous();  // F32 [256], CPU
    std::copy_n(code.const_data_ptr<float>(), 16, t.code);
    std::copy_n(dynamic.const_data_ptr<float>(), 256, t.dynamic_map);
    return t;
  }();
  return values;
}

bool on(const at::Tensor& t, const at::Device& device) {
  return t.defined() && t.device() == device && t.is_contiguous();
}

}  // namespace

bool nf4_dequantize_available(const quant::Nf4Tensor& q) {
  if (!q.packed.defined() || !q.packed.is_cuda()) return false;
  const at::Device device = q.packed.device();
  if (!on(q.packed, device) || q.numel() % 8 != 0 || q.blocksize % 8 != 0) return false;
  if (reinterpret_cast<uintptr_t>(q.packed.const_data_ptr()) % 4 != 0) return false;  // read 4 bytes at a time
  if (!q.double_quant()) return on(q.absmax, device);
  return on(q.absmax_codes, device) && on(q.absmax2, device) && on(q.offset, device) && q.blocksize2 > 0;
}

namespace {

kernels::Nf4View view_of(const quant::Nf4Tensor& q) {
  kernels::Nf4View view{};
  view.packed = q.packed.const_data_ptr<uint8_t>();
  view.n = q.numel();
  view.blocksize = q.blocksize;
  if (q.double_quant()) {
    view.absmax_codes = q.absmax_codes.const_data_ptr<uint8_t>();
    view.absmax2 = q.absmax2.const_data_ptr<float>();
    view.offset = q.offset.const_data_ptr<float>();
    view.blocksize2 = q.blocksize2;
  } else {
    view.absmax = q.absmax.const_data_ptr<float>();
  }
  return view;
}

}  // namespace

void nf4_dequantize_into(const quant::Nf4Tensor& q, at::Tensor& out) {
  FT_CHECK(nf4_dequantize_available(q), "nf4_dequantize_into: the kernel cannot take this weight");
  FT_CHECK(out.is_contiguous() && out.numel() == q.numel() && out.device() == q.packed.device() &&
               kernel_supports(out.scalar_type()) &&
               reinterpret_cast<uintptr_t>(out.data_ptr()) % (8 * out.element_size()) == 0,
           "nf4_dequantize_into: out must be contiguous F32/BF16/F16 with the weight's size, on its device, aligned "
           "to 8 elements");
  kernels::nf4_dequantize(view_of(q), tables(), out.data_ptr(), kernel_dtype(out.scalar_type()), stream_of(out));
}

bool nf4_to_fp8_available(const Nf4Rows& rows) {
  if (rows.empty()) return false;
  return std::all_of(rows.begin(), rows.end(), [&](const auto& q) {
    return nf4_dequantize_available(*q) && q->shape.size() == 2 && q->shape[0] % 16 == 0 && q->shape[1] % 16 == 0 &&
           q->shape[1] == rows.front()->shape[1] && q->packed.device() == rows.front()->packed.device();
  });
}

quant::Fp8Tensor nf4_to_fp8_cuda(const Nf4Rows& rows) {
  FT_CHECK(nf4_to_fp8_available(rows), "nf4_to_fp8_cuda: the kernel cannot take these weights");
  const int64_t cols = rows.front()->shape[1];
  int64_t total = 0;
  for (const auto& q : rows) total += q->shape[0];
  const auto options = rows.front()->packed.options();
  quant::Fp8Tensor w{at::empty({total, cols}, options.dtype(at::kFloat8_e4m3fn)),
                     at::empty({total}, options.dtype(at::kFloat))};  // [sum out_i, in], [sum out_i]
  int64_t row = 0;
  for (const auto& q : rows) {
    kernels::nf4_to_fp8_rows(view_of(*q), tables(), q->shape[0], cols,
                             static_cast<uint8_t*>(w.data.data_ptr()) + row * cols, w.scale.data_ptr<float>() + row,
                             stream_of(q->packed));
    row += q->shape[0];
  }
  return w;
}

at::Tensor nf4_to_fp8_transposed_cuda(const Nf4Rows& rows, const at::Tensor& scale) {
  FT_CHECK(nf4_to_fp8_available(rows), "nf4_to_fp8_transposed_cuda: the kernel cannot take these weights");
  const int64_t cols = rows.front()->shape[1];
  int64_t total = 0;
  for (const auto& q : rows) total += q->shape[0];
  FT_CHECK(scale.scalar_type() == at::kFloat && scale.is_contiguous() && scale.numel() == total &&
               scale.device() == rows.front()->packed.device(),
           "nf4_to_fp8_transposed_cuda: scale must be the weights' F32 row scales [sum out_i], on their device");
  at::Tensor codes_t = at::empty({cols, total}, rows.front()->packed.options().dtype(at::kFloat8_e4m3fn));
  int64_t row = 0;
  for (const auto& q : rows) {
    kernels::nf4_to_fp8_transposed(view_of(*q), tables(), q->shape[0], cols, scale.const_data_ptr<float>() + row,
                                   static_cast<uint8_t*>(codes_t.data_ptr()) + row, total, stream_of(q->packed));
    row += q->shape[0];
  }
  return codes_t;  // [in, sum out_i]
}

}  // namespace ft::model
