#include "model/linear_cross_entropy.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "util/error.h"

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kIgnoreIndex = -100;

// Per-row losses of the logits chunk in one kernel, the logits becoming the gradient of their sum when `grad`
// (ignored rows: loss 0, gradient 0). False where the kernel does not apply (no CUDA kernels, CPU, other dtypes).
bool kernel_rows(at::Tensor& logits, const at::Tensor& labels, at::Tensor& row_loss, bool grad) {
  if (!fused_cross_entropy_rows_available(logits)) return false;
  row_loss = fused_cross_entropy_rows(logits, labels, kIgnoreIndex, grad);  // F32 [n]
  return true;
}

// dw F32 [V, H] += g^T h for g [n, V] and h [n, H] in cdt.
void add_weight_grad(at::Tensor& dw, const at::Tensor& g, const at::Tensor& h, at::ScalarType cdt) {
  if (cdt == at::kFloat) {
    dw.addmm_(g.t(), h);
  } else if (dw.is_cuda()) {  // half-precision operands, F32 accumulation into dw inside the GEMM
    at::addmm_out(dw, dw, g.t(), h, at::kFloat);
  } else {
    dw.add_(at::mm(g.t(), h).to(at::kFloat));
  }
}

class LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& labels, int64_t compute_dtype, int64_t chunk_rows, bool with_grads,
                            double softcap) {
    const auto cdt = static_cast<at::ScalarType>(compute_dtype);
    const bool grad_h = with_grads && hidden.requires_grad();
    const bool grad_w = with_grads && weight.requires_grad();
    const int64_t n = hidden.size(0);
    const at::Tensor w = weight.to(cdt);  // [V, H]
    at::Tensor total = at::zeros({}, hidden.options().dtype(at::kFloat));
    at::Tensor dh = grad_h ? at::empty_like(hidden) : at::Tensor();  // [N, H]
    at::Tensor dw =
        grad_w ? at::zeros(weight.sizes(), weight.options().dtype(at::kFloat)) : at::Tensor();  // F32 [V, H]
    for (int64_t start = 0; start < n; start += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, n - start);
      const at::Tensor h = hidden.narrow(0, start, rows).to(cdt);  // [n, H]
      const at::Tensor label = labels.narrow(0, start, rows);      // I64 [n]
      at::Tensor logits = at::mm(h, w.t());                        // cdt [n, V]
      at::Tensor capped;  // cdt [n, V]: tanh(logits / softcap) with soft-capping (Gemma 2), else undefined
      if (softcap > 0.0) {
        capped = at::tanh(logits / softcap);
        logits = capped * softcap;  // transformers' (logits / cap).tanh() * cap, in cdt
      }
      // With soft-capping the gradient of the capped logits times d cap*tanh(x/cap)/dx = 1 - tanh^2.
      const auto uncap = [&](at::Tensor& g) {
        if (capped.defined()) g.mul_(1.0 - capped * capped);
      };
      at::Tensor row_loss;  // F32 [n]
      if (kernel_rows(logits, label, row_loss, grad_h || grad_w)) {
        total += row_loss.sum();
        if (grad_h || grad_w) uncap(logits);
        // logits now hold d(sum CE)/d logits, zero on ignored rows: no masks needed.
        if (grad_h) {
          at::Tensor dh_rows = dh.narrow(0, start, rows);  // [n, H], contiguous
          if (dh_rows.scalar_type() == cdt) {
            at::mm_out(dh_rows, logits, w);
          } else {
            dh_rows.copy_(at::mm(logits, w));
          }
        }
        if (grad_w) add_weight_grad(dw, logits, h, cdt);
        continue;
      }
      const at::Tensor valid = label.ne(kIgnoreIndex);                                        // Bool [n]
      const at::Tensor target = at::where(valid, label, at::zeros_like(label)).unsqueeze(1);  // I64 [n, 1]
      // One kernel from the cdt logits to F32 log-probabilities (what cross_entropy on upcast logits computes).
      // The half_to_float kernel exists for fp16 on CUDA only; elsewhere upcast first.
      const bool upcast_inside = cdt == at::kHalf && logits.is_cuda();
      const at::Tensor logp = upcast_inside ? at::_log_softmax(logits, 1, /*half_to_float=*/true)
                                            : at::_log_softmax(logits.to(at::kFloat), 1, false);  // F32 [n, V]
      const at::Tensor picked = logp.gather(1, target).squeeze(1);                                // F32 [n]
      total -= at::where(valid, picked, at::zeros_like(picked)).sum();
      if (!grad_h && !grad_w) continue;
      // d(sum CE)/d logits = softmax - one_hot(target), written straight in cdt; the target column gets its value
      // from F32 (p - 1 rounded once). Ignored rows are not zeroed here (a full [n, V] pass): their rows of h and
      // of dh are, which removes them from both gradients.
      at::Tensor g = at::empty(logp.sizes(), logp.options().dtype(cdt));  // [n, V]
      at::exp_out(g, logp);
      g.scatter_(1, target, (picked.exp() - 1.0).unsqueeze(1).to(cdt));
      uncap(g);
      const at::Tensor keep = valid.unsqueeze(1);  // Bool [n, 1]
      if (grad_h) dh.narrow(0, start, rows).copy_(at::mm(g, w).masked_fill_(keep.logical_not(), 0));
      if (grad_w) add_weight_grad(dw, g, h.masked_fill(keep.logical_not(), 0), cdt);
    }
    ctx->save_for_backward({dh, dw});
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return total;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& go = grad_out[0];  // F32 []
    at::Tensor dh = saved[0].defined() ? saved[0] * go.to(saved[0].scalar_type()) : at::Tensor();
    at::Tensor dw;
    if (saved[1].defined()) {
      dw = (saved[1] * go).to(static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt()));
    }
    return {dh, dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor linear_cross_entropy_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
                                    at::ScalarType compute_dtype, int64_t chunk_rows, double softcap) {
  FT_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
           "linear_cross_entropy_sum: hidden [N, H] and weight [V, H] expected");
  FT_CHECK(labels.dim() == 1 && labels.size(0) == hidden.size(0), "linear_cross_entropy_sum: labels [N] expected");
  if (chunk_rows <= 0) chunk_rows = std::max<int64_t>(1, (int64_t{1} << 28) / std::max<int64_t>(1, weight.size(0)));
  const bool with_grads = at::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
  return LinearCrossEntropy::apply(hidden, weight, labels, static_cast<int64_t>(compute_dtype), chunk_rows, with_grads,
                                   softcap);
}

}  // namespace ft::model
