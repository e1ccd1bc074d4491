// Per-layer activation checkpointing: a reentrant autograd Function that stores only the layer input (the sum of the
// residual and pending delta it is given) and reruns the layer under grad mode in backward (an MoE layer's router
// logits, when collected, are outputs of it as well). The layer's trainable
// parameters are inputs of the Function, so their gradients flow back through the ordinary engine (and its hooks) even
// when the hidden state itself does not require grad (frozen embeddings under LoRA).
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <optional>
#include <tuple>

#include "model/activation_offload.h"
#include "model/mode_guards.h"
#include "model/recompute.h"
#include "model/transformer.h"
#include "util/error.h"

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Autocast state of the forward, re-entered in the recompute.
struct AutocastState {
  bool cpu = false, cuda = false;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kBFloat16;

  static AutocastState capture() {
    AutocastState s;
    s.cpu = at::autocast::is_autocast_enabled(at::kCPU);
    s.cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    return s;
  }
};

// RAII: swaps in a saved generator state (CPU and, for CUDA inputs, the device's), restores the current on exit.
class RngScope {
 public:
  RngScope(const at::Device& device, const at::Tensor& cpu_state, const at::Tensor& device_state) : device_(device) {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();  // shares the default generator's state
    cpu_now_ = cpu.get_state();
    cpu.set_state(cpu_state);
    if (device_.is_cuda()) {
      at::Generator gen = at::globalContext().defaultGenerator(device_);
      device_now_ = gen.get_state();
      gen.set_state(device_state);
    }
  }
  ~RngScope() {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    cpu.set_state(cpu_now_);
    if (device_.is_cuda()) {
      at::Generator gen = at::globalContext().defaultGenerator(device_);
      gen.set_state(device_now_);
    }
  }
  RngScope(const RngScope&) = delete;
  RngScope& operator=(const RngScope&) = delete;

 private:
  at::Device device_;
  at::Tensor cpu_now_, device_now_;
};

// The layer's part of the attention plan in saved_data, and back.
void save_mask(AutogradContext* ctx, const AttentionMask& mask) {
  ctx->saved_data["kernel"] = static_cast<int64_t>(mask.kernel);
  ctx->saved_data["causal"] = mask.causal;
  if (mask.mask.defined()) ctx->saved_data["mask"] = mask.mask;
  if (mask.varlen()) {
    ctx->saved_data["cu_seqlens"] = mask.cu_seqlens;
    ctx->saved_data["max_seqlen"] = mask.max_seqlen;
    ctx->saved_data["window"] = mask.window;
  }
  if (mask.piece_start.defined()) ctx->saved_data["piece_start"] = mask.piece_start;
}

AttentionMask saved_mask(AutogradContext* ctx) {
  AttentionMask mask;
  mask.kernel = static_cast<AttentionKernel>(ctx->saved_data["kernel"].toInt());
  mask.causal = ctx->saved_data["causal"].toBool();
  if (ctx->saved_data.count("mask")) mask.mask = ctx->saved_data["mask"].toTensor();
  if (ctx->saved_data.count("cu_seqlens")) {
    mask.cu_seqlens = ctx->saved_data["cu_seqlens"].toTensor();
    mask.max_seqlen = ctx->saved_data["max_seqlen"].toInt();
    mask.window = ctx->saved_data["window"].toInt();
  }
  if (ctx->saved_data.count("piece_start")) mask.piece_start = ctx->saved_data["piece_start"].toTensor();
  return mask;
}

// model.activation_offload: the layer input h goes to the host (model/activation_offload.h) instead of into the
// saved variables; the node keeps the host copy, its prefetch target, and the layer before's pair, which this
// layer's backward prefetches. Returns false where h stays on the device (no chain, or nothing moves).
bool save_offloaded(AutogradContext* ctx, const at::Tensor& h, OffloadChain* chain) {
  if (chain == nullptr) return false;
  OffloadedInput slot = chain->offload(h);
  if (!slot.offloaded()) return false;
  ctx->saved_data["offloaded"] = true;  // kept when backward drops the tensors below
  ctx->saved_data["h_host"] = slot.host;
  ctx->saved_data["h_prefetched"] = slot.prefetched;
  ctx->saved_data["offload_stream"] = chain->packed_stream();
  if (chain->previous.offloaded()) {
    ctx->saved_data["previous_host"] = chain->previous.host;
    ctx->saved_data["previous_prefetched"] = chain->previous.prefetched;
  }
  chain->previous = std::move(slot);
  return true;
}

// The offloaded h back on `device`; then starts prefetching the layer before's, whose backward comes next. Drops the
// node's references to both: autograd frees a node's saved variables after its backward, but not its saved_data, and
// the nodes live until the graph does, so every restored input would stay on the device to the backward's end.
at::Tensor restore_offloaded(AutogradContext* ctx, at::Device device) {
  FT_CHECK(ctx->saved_data.count("h_host") > 0,
           "activation offload: a layer's offloaded input is gone after its first backward (the graph was kept "
           "for a second one: train without model.activation_offload for that)");
  const OffloadChain chain = OffloadChain::of_stream(ctx->saved_data["offload_stream"].toIntVector());
  OffloadedInput slot;
  slot.host = ctx->saved_data["h_host"].toTensor();
  slot.prefetched = ctx->saved_data["h_prefetched"].toTensor();
  ctx->saved_data.erase("h_host");
  ctx->saved_data.erase("h_prefetched");
  at::Tensor h = chain.restore(slot, device);  // [B, T, hidden]
  if (ctx->saved_data.count("previous_host") > 0) {
    OffloadedInput previous;  // the layer before's node keeps the target until its own backward takes it
    previous.host = ctx->saved_data["previous_host"].toTensor();
    previous.prefetched = ctx->saved_data["previous_prefetched"].toTensor();
    ctx->saved_data.erase("previous_host");
    ctx->saved_data.erase("previous_prefetched");
    chain.prefetch(previous, device);
  }
  return h;
}

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // inputs: residual and pending [B, T, hidden] (pending absent before the first layer), cos/sin [B, T, D], then the
  // layer's trainable parameters. The mask is no autograd input (an undefined tensor cannot be one), so it travels in
  // saved_data, and so does the kernel policy (the model's, which outlives its autograd graph). Keeps
  // h = residual + pending [B, T, hidden], the layer input, as the one activation.
  static variable_list forward(AutogradContext* ctx, DecoderLayerImpl* layer, const LayerContext* lc,
                               const at::Tensor& residual, const std::optional<at::Tensor>& pending, at::Tensor cos,
                               at::Tensor sin, at::TensorList params) {
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);  // the model outlives its autograd graph
    ctx->saved_data["policy"] = reinterpret_cast<int64_t>(lc->policy);
    save_mask(ctx, *lc->mask);
    ctx->saved_data["num_params"] = static_cast<int64_t>(params.size());
    const auto ac = AutocastState::capture();
    ctx->saved_data["ac_cpu"] = ac.cpu;
    ctx->saved_data["ac_cuda"] = ac.cuda;
    ctx->saved_data["ac_cpu_dtype"] = ac.cpu_dtype;
    ctx->saved_data["ac_cuda_dtype"] = ac.cuda_dtype;
    ctx->saved_data["rng_cpu"] = at::detail::getDefaultCPUGenerator().get_state();
    if (residual.is_cuda()) {
      ctx->saved_data["rng_dev"] = at::globalContext().defaultGenerator(residual.device()).get_state();
    }
    ctx->saved_data["h_grad"] = residual.requires_grad() || (pending && pending->requires_grad());
    ctx->saved_data["pending_dtype"] = pending ? static_cast<int64_t>(pending->scalar_type()) : int64_t{-1};
    const auto [h, normed] = layer->input_norm(residual, pending ? *pending : at::Tensor(), *lc->policy);
    if (save_offloaded(ctx, h, lc->offload)) {
      ctx->save_for_backward({cos, sin});
    } else {
      ctx->save_for_backward({h, cos, sin});
    }
    // An MoE layer's router logits, when the model collects them, are outputs too: the load-balancing loss's
    // gradient reaches the router through them.
    std::vector<at::Tensor> router_logits;
    const bool collect = lc->router_logits != nullptr;
    ctx->saved_data["collect"] = collect;
    const LayerContext layer_ctx{cos, sin, lc->mask, nullptr, lc->policy, collect ? &router_logits : nullptr};
    const auto [out_residual, out_delta] = layer->forward_normed(h, normed, layer_ctx);
    variable_list out = {out_residual, out_delta};
    out.insert(out.end(), router_logits.begin(), router_logits.end());
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(ctx->saved_data["layer"].toInt());
    const auto* policy = reinterpret_cast<const KernelPolicy*>(ctx->saved_data["policy"].toInt());
    const int64_t n = ctx->saved_data["num_params"].toInt();
    AutocastState ac;
    ac.cpu = ctx->saved_data["ac_cpu"].toBool();
    ac.cuda = ctx->saved_data["ac_cuda"].toBool();
    ac.cpu_dtype = ctx->saved_data["ac_cpu_dtype"].toScalarType();
    ac.cuda_dtype = ctx->saved_data["ac_cuda_dtype"].toScalarType();
    const bool h_grad = ctx->saved_data["h_grad"].toBool();
    const bool offloaded = ctx->saved_data.count("offloaded") > 0;
    if (offloaded) saved.insert(saved.begin(), restore_offloaded(ctx, saved[0].device()));  // {h, cos, sin}
    at::Tensor h = saved[0].detach().requires_grad_(h_grad);  // [B, T, hidden]
    const at::Tensor rng_dev = ctx->saved_data.count("rng_dev") ? ctx->saved_data["rng_dev"].toTensor() : at::Tensor();

    std::vector<at::Tensor> params;
    for (auto& p : layer->parameters()) {
      if (p.requires_grad()) params.push_back(p);
    }
    FT_CHECK(static_cast<int64_t>(params.size()) == n, "activation checkpointing: trainable parameters changed");
    at::Tensor out_residual, out_delta;
    std::vector<at::Tensor> router_logits;  // recomputed, when the forward returned them
    const bool collect = ctx->saved_data["collect"].toBool();
    {
      at::AutoGradMode grad_on(true);
      const RecomputeScope recompute;
      RngScope rng(h.device(), ctx->saved_data["rng_cpu"].toTensor(), rng_dev);
      AutocastGuard cpu_autocast(at::kCPU, ac.cpu_dtype, ac.cpu);
      AutocastGuard cuda_autocast(at::kCUDA, ac.cuda_dtype, ac.cuda);
      const AttentionMask mask = saved_mask(ctx);
      // The norm of h alone gives the bits the forward's fused add + norm gave (ops::add_rms_norm).
      const auto normed = layer->input_norm(h, at::Tensor(), *policy).second;
      const LayerContext layer_ctx{saved[1], saved[2], &mask, nullptr, policy, collect ? &router_logits : nullptr};
      std::tie(out_residual, out_delta) = layer->forward_normed(h, normed, layer_ctx);
    }
    variable_list recomputed = {out_residual, out_delta};
    recomputed.insert(recomputed.end(), router_logits.begin(), router_logits.end());
    FT_CHECK(recomputed.size() == grad_out.size(), "activation checkpointing: the recompute's outputs changed");
    variable_list outputs, grads_of_outputs;
    for (size_t i = 0; i < recomputed.size(); ++i) {
      const at::Tensor& out = recomputed[i];
      if (out.requires_grad() && grad_out[i].defined()) {
        outputs.push_back(out);
        grads_of_outputs.push_back(grad_out[i]);
      }
    }
    variable_list wrt;
    if (h_grad) wrt.push_back(h);
    wrt.insert(wrt.end(), params.begin(), params.end());
    variable_list grads = outputs.empty()
                              ? variable_list(wrt.size())
                              : torch::autograd::grad(outputs, wrt, grads_of_outputs, std::nullopt, false, true);
    // One slot per forward input: layer, context, residual, pending, cos, sin, then each parameter. residual and
    // pending both get h's gradient, pending's in its own dtype (what autograd's add would give it).
    variable_list result = {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    size_t g = 0;
    if (h_grad) {
      const at::Tensor& dh = grads[g++];
      const int64_t pending_dtype = ctx->saved_data["pending_dtype"].toInt();
      result[2] = dh;
      if (pending_dtype >= 0 && dh.defined()) result[3] = dh.to(static_cast<at::ScalarType>(pending_dtype));
    }
    for (; g < grads.size(); ++g) result.push_back(grads[g]);
    return result;
  }
};

}  // namespace

std::pair<at::Tensor, at::Tensor> checkpointed_layer(DecoderLayerImpl& layer, const at::Tensor& residual,
                                                     const at::Tensor& pending, const LayerContext& ctx) {
  variable_list params;
  for (auto& p : layer.parameters()) {
    if (p.requires_grad()) params.push_back(p);
  }
  // TensorList (not std::vector) so that autograd sees every parameter as an input.
  const auto out = CheckpointFunction::apply(&layer, &ctx, residual,
                                             pending.defined() ? std::optional<at::Tensor>(pending) : std::nullopt,
                                             ctx.cos, ctx.sin, at::TensorList(params));
  for (size_t i = 2; i < out.size(); ++i) ctx.router_logits->push_back(out[i]);
  return {out[0], out[1]};
}

}  // namespace ft::model
