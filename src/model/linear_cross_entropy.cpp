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

// One chunk of rows: the logits h @ w^T in cdt (soft-capped when softcap > 0), their per-row losses F32 [n], and
// with `grad` the gradient of the rows' summed loss w.r.t. the uncapped logits, cdt [n, V], zero on ignored rows.
struct ChunkLoss {
  at::Tensor row_loss;     // F32 [n]
  at::Tensor grad_logits;  // cdt [n, V] or undefined
};
ChunkLoss chunk_loss(const at::Tensor& h, const at::Tensor& w, const at::Tensor& label, double softcap, bool grad) {
  at::Tensor logits = at::mm(h, w.t());  // cdt [n, V]
  at::Tensor capped;  // cdt [n, V]: tanh(logits / softcap) with soft-capping (Gemma 2), else undefined
  if (softcap > 0.0) {
    capped = at::tanh(logits / softcap);
    logits = capped * softcap;  // transformers' (logits / cap).tanh() * cap, in cdt
  }
  // With soft-capping the gradient of the capped logits times d cap*tanh(x/cap)/dx = 1 - tanh^2.
  const auto uncap = [&](at::Tensor& g) {
    if (capped.defined()) g.mul_(1.0 - capped * capped);
  };
  ChunkLoss out;
  if (kernel_rows(logits, label, out.row_loss, grad)) {
    // logits now hold d(sum CE)/d logits, zero on ignored rows.
    if (grad) {
      uncap(logits);
      out.grad_logits = logits;
    }
    return out;
  }
  const at::ScalarType cdt = logits.scalar_type();
  const at::Tensor valid = label.ne(kIgnoreIndex);                                        // Bool [n]
  const at::Tensor target = at::where(valid, label, at::zeros_like(label)).unsqueeze(1);  // I64 [n, 1]
  // One kernel from the cdt logits to F32 log-probabilities (what cross_entropy on upcast logits computes).
  // The half_to_float kernel exists for fp16 on CUDA only; elsewhere upcast first.
  const bool upcast_inside = cdt == at::kHalf && logits.is_cuda();
  const at::Tensor logp = upcast_inside ? at::_log_softmax(logits, 1, /*half_to_float=*/true)
                                        : at::_log_softmax(logits.to(at::kFloat), 1, false);  // F32 [n, V]
  const at::Tensor picked = logp.gather(1, target).squeeze(1);                                // F32 [n]
  out.row_loss = at::where(valid, -picked, at::zeros_like(picked));
  if (!grad) return out;
  // d(sum CE)/d logits = softmax - one_hot(target), written straight in cdt; the target column gets its value from
  // F32 (p - 1 rounded once).
  at::Tensor g = at::empty(logp.sizes(), logp.options().dtype(cdt));  // [n, V]
  at::exp_out(g, logp);
  g.scatter_(1, target, (picked.exp() - 1.0).unsqueeze(1).to(cdt));
  uncap(g);
  out.grad_logits = g.masked_fill_(valid.logical_not().unsqueeze(1), 0);
  return out;
}

// dh rows [start, start + n) = g @ w, written in place when dh has g's dtype.
void put_hidden_grad(at::Tensor& dh, int64_t start, const at::Tensor& g, const at::Tensor& w) {
  at::Tensor rows = dh.narrow(0, start, g.size(0));  // [n, H], contiguous
  if (rows.scalar_type() == g.scalar_type()) {
    at::mm_out(rows, g, w);
  } else {
    rows.copy_(at::mm(g, w));
  }
}

// Calls fn(start, h, label) for every chunk of `chunk_rows` rows: h = hidden's rows [start, start + n) in cdt
// ([n, H]), label = their labels (I64 [n]).
template <class Fn>
void for_each_chunk(const at::Tensor& hidden, const at::Tensor& labels, int64_t chunk_rows, at::ScalarType cdt,
                    Fn&& fn) {
  for (int64_t start = 0; start < hidden.size(0); start += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, hidden.size(0) - start);
    fn(start, hidden.narrow(0, start, rows).to(cdt), labels.narrow(0, start, rows));
  }
}

// Sum over rows: the gradients are made chunk by chunk in forward and kept until backward scales them by the
// incoming scalar gradient.
class LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& labels, int64_t compute_dtype, int64_t chunk_rows, bool with_grads,
                            double softcap) {
    const auto cdt = static_cast<at::ScalarType>(compute_dtype);
    const bool grad_h = with_grads && hidden.requires_grad();
    const bool grad_w = with_grads && weight.requires_grad();
    const at::Tensor w = weight.to(cdt);  // [V, H]
    at::Tensor total = at::zeros({}, hidden.options().dtype(at::kFloat));
    at::Tensor dh = grad_h ? at::empty_like(hidden) : at::Tensor();  // [N, H]
    at::Tensor dw =
        grad_w ? at::zeros(weight.sizes(), weight.options().dtype(at::kFloat)) : at::Tensor();  // F32 [V, H]
    for_each_chunk(hidden, labels, chunk_rows, cdt, [&](int64_t start, const at::Tensor& h, const at::Tensor& label) {
      const ChunkLoss c = chunk_loss(h, w, label, softcap, grad_h || grad_w);
      total += c.row_loss.sum();
      if (grad_h) put_hidden_grad(dh, start, c.grad_logits, w);
      if (grad_w) add_weight_grad(dw, c.grad_logits, h, cdt);
    });
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

// Per-row losses. Rows are independent, so hidden's gradient is made in forward as for the sum and scaled row by
// row in backward; the weight's gradient mixes rows with their incoming gradients, so a trainable weight has its
// logits recomputed in backward (one extra GEMM per chunk).
class LinearCrossEntropyRows : public torch::autograd::Function<LinearCrossEntropyRows> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& labels, int64_t compute_dtype, int64_t chunk_rows, bool with_grads,
                            double softcap) {
    const auto cdt = static_cast<at::ScalarType>(compute_dtype);
    const bool grad_h = with_grads && hidden.requires_grad();
    const bool grad_w = with_grads && weight.requires_grad();
    const at::Tensor w = weight.to(cdt);                                                  // [V, H]
    at::Tensor losses = at::empty({hidden.size(0)}, hidden.options().dtype(at::kFloat));  // F32 [N]
    at::Tensor dh = grad_h ? at::empty_like(hidden) : at::Tensor();                       // [N, H]
    for_each_chunk(hidden, labels, chunk_rows, cdt, [&](int64_t start, const at::Tensor& h, const at::Tensor& label) {
      const ChunkLoss c = chunk_loss(h, w, label, softcap, grad_h);
      losses.narrow(0, start, label.size(0)).copy_(c.row_loss);
      if (grad_h) put_hidden_grad(dh, start, c.grad_logits, w);
    });
    ctx->save_for_backward({dh, grad_w ? hidden : at::Tensor(), grad_w ? weight : at::Tensor(), labels});
    ctx->saved_data["compute_dtype"] = compute_dtype;
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->saved_data["softcap"] = softcap;
    return losses;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor go = grad_out[0].contiguous();  // F32 [N]
    at::Tensor dh;
    if (saved[0].defined()) dh = saved[0] * go.unsqueeze(1).to(saved[0].scalar_type());
    at::Tensor dw;
    if (saved[2].defined()) {
      const at::Tensor &hidden = saved[1], &weight = saved[2], &labels = saved[3];
      const auto cdt = static_cast<at::ScalarType>(ctx->saved_data["compute_dtype"].toInt());
      const int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
      const double softcap = ctx->saved_data["softcap"].toDouble();
      const at::Tensor w = weight.to(cdt);
      at::Tensor acc = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));  // F32 [V, H]
      for_each_chunk(hidden, labels, chunk_rows, cdt, [&](int64_t start, const at::Tensor& h, const at::Tensor& label) {
        ChunkLoss c = chunk_loss(h, w, label, softcap, true);
        c.grad_logits.mul_(go.narrow(0, start, label.size(0)).unsqueeze(1).to(cdt));
        add_weight_grad(acc, c.grad_logits, h, cdt);
      });
      dw = acc.to(weight.scalar_type());
    }
    return {dh, dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

int64_t default_chunk_rows(int64_t chunk_rows, const at::Tensor& weight) {
  if (chunk_rows > 0) return chunk_rows;
  return std::max<int64_t>(1, (int64_t{1} << 28) / std::max<int64_t>(1, weight.size(0)));
}

void check_shapes(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels) {
  FT_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
           "linear cross-entropy: hidden [N, H] and weight [V, H] expected");
  FT_CHECK(labels.dim() == 1 && labels.size(0) == hidden.size(0), "linear cross-entropy: labels [N] expected");
}

}  // namespace

at::Tensor linear_cross_entropy_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
                                    at::ScalarType compute_dtype, int64_t chunk_rows, double softcap) {
  check_shapes(hidden, weight, labels);
  const bool with_grads = at::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
  return LinearCrossEntropy::apply(hidden, weight, labels, static_cast<int64_t>(compute_dtype),
                                   default_chunk_rows(chunk_rows, weight), with_grads, softcap);
}

at::Tensor linear_cross_entropy_rows(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
                                     at::ScalarType compute_dtype, int64_t chunk_rows, double softcap) {
  check_shapes(hidden, weight, labels);
  const bool with_grads = at::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
  return LinearCrossEntropyRows::apply(hidden, weight, labels, static_cast<int64_t>(compute_dtype),
                                       default_chunk_rows(chunk_rows, weight), with_grads, softcap);
}

}  // namespace ft::model
