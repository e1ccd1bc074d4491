#include "model/nf4_linear.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <string>

#include "model/fp8_linear.h"
#include "model/fp8_training.h"
#include "model/recompute.h"
#include "model/transformer.h"
#include "util/error.h"

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// An NF4 weight travels through saved_data as its tensors and sizes (an IValue holds no C++ struct). `i` numbers
// the row blocks.
void save_rows(AutogradContext* ctx, const Nf4Rows& rows) {
  ctx->saved_data["rows"] = static_cast<int64_t>(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const quant::Nf4Tensor& q = *rows[i];
    const std::string k = std::to_string(i);
    ctx->saved_data["packed" + k] = q.packed;
    ctx->saved_data["shape" + k] = q.shape;
    ctx->saved_data["blocksize" + k] = q.blocksize;
    ctx->saved_data["double" + k] = q.double_quant();
    if (q.double_quant()) {
      ctx->saved_data["codes" + k] = q.absmax_codes;
      ctx->saved_data["absmax2" + k] = q.absmax2;
      ctx->saved_data["offset" + k] = q.offset;
      ctx->saved_data["blocksize2" + k] = q.blocksize2;
    } else {
      ctx->saved_data["absmax" + k] = q.absmax;
    }
  }
}

Nf4Rows load_rows(AutogradContext* ctx) {
  Nf4Rows rows;
  const int64_t n = ctx->saved_data["rows"].toInt();
  for (int64_t i = 0; i < n; ++i) {
    const std::string k = std::to_string(i);
    auto q = std::make_shared<quant::Nf4Tensor>();
    q->packed = ctx->saved_data["packed" + k].toTensor();
    q->shape = ctx->saved_data["shape" + k].toIntVector();
    q->blocksize = ctx->saved_data["blocksize" + k].toInt();
    if (ctx->saved_data["double" + k].toBool()) {
      q->absmax_codes = ctx->saved_data["codes" + k].toTensor();
      q->absmax2 = ctx->saved_data["absmax2" + k].toTensor();
      q->offset = ctx->saved_data["offset" + k].toTensor();
      q->blocksize2 = ctx->saved_data["blocksize2" + k].toInt();
    } else {
      q->absmax = ctx->saved_data["absmax" + k].toTensor();
    }
    rows.push_back(std::move(q));
  }
  return rows;
}

// What a backward reads besides the weight: the GEMMs' dtype, the input's (dx is returned in it) and whether our
// kernels run.
struct GemmSettings {
  at::ScalarType dtype = at::kFloat, x_dtype = at::kFloat;
  bool kernels = false;

  void save(AutogradContext* ctx) const {
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x_dtype);
    ctx->saved_data["kernels"] = kernels;
  }
  static GemmSettings load(AutogradContext* ctx) {
    return {static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt()),
            static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt()), ctx->saved_data["kernels"].toBool()};
  }
};

// y [N, out] = x [N, in] W^T with W dequantized for the GEMM; backward: dx = dy W, W dequantized again.
class Nf4Gemm : public torch::autograd::Function<Nf4Gemm> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const Nf4Rows& rows, at::ScalarType dtype,
                            bool kernels) {
    KernelPolicy policy;
    policy.kernels = kernels;
    const at::Tensor w = dequantize_rows(rows, dtype, policy);  // [out, in]
    if (recomputing()) {
      ctx->save_for_backward({w});  // this layer's backward comes next (model/recompute.h)
    } else {
      save_rows(ctx, rows);  // w is freed on return
    }
    GemmSettings{dtype, x.scalar_type(), kernels}.save(ctx);
    return at::mm(x.to(dtype), w.t());  // [N, out]
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const GemmSettings settings = GemmSettings::load(ctx);
    KernelPolicy policy;
    policy.kernels = settings.kernels;
    const auto saved = ctx->get_saved_variables();
    const at::Tensor w =
        saved.empty() ? dequantize_rows(load_rows(ctx), settings.dtype, policy) : saved[0];  // [out, in]
    at::Tensor dx = at::mm(grads[0].to(settings.dtype), w).to(settings.x_dtype);             // [N, in]
    return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// y [N, out] = x [N, in] W^T through FP8 GEMMs, W dequantized to e4m3 codes with row scales; backward: dx = dy W
// over the codes dequantized again, transposed. Only the row scales [out] are kept between the two.
class Nf4Fp8Gemm : public torch::autograd::Function<Nf4Fp8Gemm> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const Nf4Rows& rows, at::ScalarType dtype,
                            bool fast) {
    KernelPolicy policy;
    policy.kernels = fast;
    const quant::Fp8Tensor w = nf4_to_fp8(rows, policy);  // F8E4M3FN [out, in], F32 [out]; kernel or ATen, same bits
    save_rows(ctx, rows);
    ctx->save_for_backward({w.scale});
    GemmSettings{dtype, x.scalar_type(), fast}.save(ctx);
    return fp8_rows_forward(x, w, dtype, fast);  // [N, out]
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const GemmSettings settings = GemmSettings::load(ctx);
    const bool fast = settings.kernels;  // and _scaled_mm
    const Nf4Rows rows = load_rows(ctx);
    const at::Tensor scale = ctx->get_saved_variables()[0];  // F32 [out]
    at::Tensor codes_t;                                      // [in, out]
    if (!fast) {
      codes_t = nf4_to_fp8(rows, KernelPolicy{}).data.t();
    } else if (nf4_to_fp8_available(rows)) {
      codes_t = nf4_to_fp8_transposed_cuda(rows, scale);
    } else {  // codes our kernels do not take (their layout): the ATen conversion, then a transpose
      codes_t = fp8_transpose_cuda(nf4_to_fp8(rows, KernelPolicy{}).data);
    }
    const at::Tensor dx = fp8_rows_input_grad(grads[0], codes_t, scale, settings.dtype, fast);  // [N, in]
    return {dx.to(settings.x_dtype), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor dequantize_weight(const quant::Nf4Tensor& q, at::ScalarType dtype, const KernelPolicy& policy) {
  if (!policy.kernels_for(q.packed) || !nf4_dequantize_available(q)) return quant::dequantize_nf4(q, dtype);
  at::Tensor w = at::empty(q.shape, q.packed.options().dtype(dtype));
  nf4_dequantize_into(q, w);
  return w;
}

at::Tensor dequantize_rows(const Nf4Rows& rows, at::ScalarType dtype, const KernelPolicy& policy) {
  FT_CHECK(!rows.empty(), "dequantize_rows: no weights");
  const quant::Nf4Tensor& first = *rows.front();
  FT_CHECK(first.shape.size() == 2, "dequantize_rows: NF4 weights of projections are [out, in]");
  const int64_t in = first.shape[1];
  int64_t out_rows = 0;
  bool kernel = policy.kernels_for(first.packed);
  for (const auto& q : rows) {
    FT_CHECK(q->shape.size() == 2 && q->shape[1] == in, "dequantize_rows: the stacked weights differ in `in`");
    out_rows += q->shape[0];
    kernel = kernel && nf4_dequantize_available(*q);
  }
  if (rows.size() == 1) return dequantize_weight(first, dtype, policy);  // [out, in]
  if (!kernel) {
    std::vector<at::Tensor> parts;
    for (const auto& q : rows) parts.push_back(quant::dequantize_nf4(*q, dtype));
    return at::cat(parts);  // [sum out_i, in]
  }
  // Each block starts a whole number of 8-element groups into the buffer (numel % 8 == 0), as the kernel needs.
  at::Tensor w = at::empty({out_rows, in}, first.packed.options().dtype(dtype));  // [sum out_i, in]
  int64_t row = 0;
  for (const auto& q : rows) {
    at::Tensor block = w.narrow(0, row, q->shape[0]);  // [out_i, in], contiguous
    nf4_dequantize_into(*q, block);
    row += q->shape[0];
  }
  return w;
}

quant::Fp8Tensor nf4_to_fp8(const Nf4Rows& rows, const KernelPolicy& policy) {
  FT_CHECK(!rows.empty(), "nf4_to_fp8: no weights");
  if (policy.kernels_for(rows.front()->packed) && nf4_to_fp8_available(rows)) return nf4_to_fp8_cuda(rows);
  return quant::quantize_fp8_rows(dequantize_rows(rows, at::kFloat, KernelPolicy{}));
}

at::Tensor nf4_linear(const at::Tensor& x, const Nf4Rows& rows, at::ScalarType weight_dtype, Nf4Compute compute,
                      const KernelPolicy& policy) {
  for (const auto& q : rows) {
    if (q->packed.device() != x.device()) {
      throw Error("NF4 weight on " + q->packed.device().str() + ", its input on " + x.device().str(),
                  "NF4 codes are no module state and do not move with Module::to: quantize on the device the model "
                  "runs on (model.quantize quantizes on run.device while loading)");
    }
  }
  const auto device_type = x.device().type();
  const at::ScalarType dtype =
      at::autocast::is_autocast_enabled(device_type) ? at::autocast::get_autocast_dtype(device_type) : weight_dtype;
  const at::Tensor x2d = x.reshape({-1, x.size(-1)});  // [N, in]
  at::Tensor y;                                        // [N, out]
  if (compute == Nf4Compute::kFp8) {
    const bool fast =
        policy.kernels_for(x) && dtype == at::kBFloat16 && fp8_tensor_cores(x.device()) && nf4_fp8_gemm_sizes(rows);
    y = Nf4Fp8Gemm::apply(x2d, rows, dtype, fast);
  } else {
    y = Nf4Gemm::apply(x2d, rows, dtype, policy.kernels_for(x));
  }
  if (x.dim() == 2) return y;  // not a view: callers add into it in place (a view would make that a CopySlices)
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = y.size(1);
  return y.view(shape);
}

bool nf4_fp8_gemm_sizes(const Nf4Rows& rows) {
  return std::all_of(rows.begin(), rows.end(), [](const auto& q) {
    return q->shape.size() == 2 && q->shape[0] % 16 == 0 && q->shape[1] % 16 == 0;
  });
}

std::vector<std::string> set_nf4_compute(Transformer& model, Nf4Compute compute) {
  std::vector<std::string> left;
  for (auto& [projection_path, layer] : model.projections()) {
    if (!layer->nf4) continue;
    if (compute == Nf4Compute::kFp8 && !nf4_fp8_gemm_sizes({layer->nf4})) {
      left.push_back(projection_path);
      continue;
    }
    layer->nf4_compute = compute;
  }
  return left;
}

}  // namespace ft::model
