#include "model/moe.h"

#include "model/moe_experts.h"
#include "util/error.h"

namespace ft::model {

MoeRouterImpl::MoeRouterImpl(const ModelArgs& a)
    : top_k(a.num_experts_per_tok),
      norm_topk_prob(a.norm_topk_prob),
      weights_in_compute_dtype(a.model_type == "qwen3_moe") {
  weight = register_parameter("weight", at::zeros({a.num_experts, a.hidden_size}));
}

RouterChoice MoeRouterImpl::forward(const at::Tensor& x) {
  RouterChoice c;
  c.logits = at::linear(x, weight);  // [N, E]
  if (lora.a.defined()) {            // PEFT's ParamWrapper on a 2-D weight: (x A^T) B^T, scaled
    const auto dtype = x.scalar_type();
    c.logits = c.logits + at::linear(at::linear(x, lora.a.to(dtype)), lora.b.to(dtype)) * lora.scaling;
  }
  const at::Tensor probs = at::softmax(c.logits, -1, at::kFloat);  // F32 [N, E]
  auto [top, index] = at::topk(probs, top_k, -1);                  // F32 [N, k], I64 [N, k]
  if (norm_topk_prob) top = top / top.sum(-1, /*keepdim=*/true);
  c.weights = weights_in_compute_dtype ? top.to(c.logits.scalar_type()) : top;
  c.experts = index;
  return c;
}

MoeExpertsImpl::MoeExpertsImpl(const ModelArgs& a) {
  const int64_t e = a.num_experts, i = a.moe_intermediate_size, h = a.hidden_size;
  // Unset, as LinearImpl's weights: a load or init_weights writes them, and a model built only to be checked (`config
  // validate`) reserves their address space without touching it.
  gate_up_proj = register_parameter("gate_up_proj", at::empty({e, 2 * i, h}));
  down_proj = register_parameter("down_proj", at::empty({e, h, i}));
}

at::Tensor MoeExpertsImpl::forward(const at::Tensor& x, const RouterChoice& choice, const KernelPolicy& policy) {
  return ops::moe_experts(x, choice.experts, choice.weights, gate_up(), down(), policy, &gate_up_lora, &down_lora);
}

void MoeExpertsImpl::quantize(const std::string& name, const at::Tensor& value, BaseQuantization format,
                              at::ScalarType dtype) {
  FT_CHECK(name == "gate_up_proj" || name == "down_proj",
           "MoeExperts::quantize: no expert weight named '" + name + "' (gate_up_proj or down_proj)");
  at::Tensor& weight = name == "gate_up_proj" ? gate_up_proj : down_proj;
  auto& codes = name == "gate_up_proj" ? gate_up_codes : down_codes;
  FT_CHECK(weight.defined(), "MoeExperts::quantize: " + name + " is quantized already");
  FT_CHECK(value.sizes() == weight.sizes(), "MoeExperts::quantize: the value of " + name + " has another shape");
  codes = std::make_shared<const QuantizedExperts>(quantize_experts(value, format, dtype));
  parameters_.erase(name);
  weight = at::Tensor();
}

int64_t MoeExpertsImpl::quantized_numel() const {
  return (gate_up_codes ? gate_up_codes->numel() : 0) + (down_codes ? down_codes->numel() : 0);
}

SparseMoeImpl::SparseMoeImpl(const ModelArgs& a) : jitter_noise(a.router_jitter_noise) {
  gate = register_module("gate", MoeRouter(a));
  experts = register_module("experts", MoeExperts(a));
}

at::Tensor SparseMoeImpl::forward(const at::Tensor& x, const KernelPolicy& policy,
                                  std::vector<at::Tensor>* router_logits) {
  at::Tensor h = x.reshape({-1, x.size(-1)});  // [N, hidden]
  if (is_training() && jitter_noise > 0.0) {   // mixtral: the router and the experts both see the noisy input
    h = h * at::empty_like(h).uniform_(1.0 - jitter_noise, 1.0 + jitter_noise);
  }
  const RouterChoice choice = gate->forward(h);
  if (router_logits != nullptr) router_logits->push_back(choice.logits);
  return experts->forward(h, choice, policy).view(x.sizes());
}

at::Tensor load_balancing_loss(const std::vector<at::Tensor>& router_logits, int64_t num_experts, int64_t top_k) {
  if (router_logits.empty()) return {};
  const auto f32 = router_logits.front().options().dtype(at::kFloat);
  at::Tensor choices = at::zeros({num_experts}, f32);   // F32 [E]: (token, k) choices per expert
  at::Tensor prob_sum = at::zeros({num_experts}, f32);  // F32 [E]
  int64_t rows = 0;
  for (const at::Tensor& logits : router_logits) {  // [N, E]
    // As transformers: the softmax in the logits' dtype, the sums in F32.
    const at::Tensor probs = at::softmax(logits, -1);
    const at::Tensor chosen = std::get<1>(at::topk(probs, top_k, -1)).reshape({-1});  // I64 [N * k]
    choices = choices.scatter_add(0, chosen, at::ones({chosen.size(0)}, f32));
    prob_sum = prob_sum + probs.to(at::kFloat).sum(0);
    rows += logits.size(0);
  }
  FT_CHECK(rows > 0, "load_balancing_loss: no tokens");
  const double n = static_cast<double>(rows);
  return ((choices / n) * (prob_sum / n)).sum() * static_cast<double>(num_experts);
}

}  // namespace ft::model
