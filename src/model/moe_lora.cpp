#include "model/moe_lora.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "model/lora_internal.h"
#include "util/error.h"

namespace ft::model {
namespace {

using lora_detail::kPeftPrefix;
using lora_detail::target_matches;

// One adaptable weight of an MoE layer.
struct MoeWeight {
  std::string path;       // model.layers.N.mlp.experts.gate_up_proj | ...experts.down_proj | model.layers.N.mlp.gate
  std::string parameter;  // PEFT's target_parameters entry: gate_up_proj | down_proj | gate.weight
  torch::nn::Module* owner;
  std::string holder;  // the submodule of `owner` that registers lora_A and lora_B
  ops::ExpertAdapter* adapter;
  ops::ExpertWeight weight;  // [E, out, in] (dense or quantized), or the router's [E, hidden]
};

// Each MoE layer's three weights, in layer order: gate_up_proj, down_proj, the router.
std::vector<MoeWeight> moe_weights(const Transformer& model) {
  std::vector<MoeWeight> out;
  for (int64_t i = 0; i < model.args().num_layers; ++i) {
    DecoderLayer layer = model.layer(i);
    if (!layer->moe) continue;
    auto& experts = *layer->moe->experts;
    auto& router = *layer->moe->gate;
    const std::string base = "model.layers." + std::to_string(i) + ".mlp.";
    out.push_back({base + "experts.gate_up_proj", "gate_up_proj", &experts, "gate_up_proj_adapter",
                   &experts.gate_up_lora, experts.gate_up()});
    out.push_back(
        {base + "experts.down_proj", "down_proj", &experts, "down_proj_adapter", &experts.down_lora, experts.down()});
    out.push_back({base + "gate", "gate.weight", &router, "adapter", &router.lora, {router.weight, nullptr}});
  }
  return out;
}

void push_adapter(std::vector<std::pair<std::string, at::Tensor>>& out, const std::string& module,
                  const ops::ExpertAdapter& adapter) {
  out.emplace_back(kPeftPrefix + module + ".lora_A.weight", adapter.a);
  out.emplace_back(kPeftPrefix + module + ".lora_B.weight", adapter.b);
}

}  // namespace

bool is_moe_target(const std::string& target) {
  for (const char* name : {"gate_up_proj", "down_proj", "gate"}) {
    if (target_matches(target, name)) return true;
  }
  return false;
}

int64_t add_moe_adapters(Transformer& model, const std::vector<std::string>& targets, int64_t rank, double alpha,
                         at::Generator& gen) {
  int64_t added = 0;
  for (auto& w : moe_weights(model)) {
    bool targeted = false;  // a loop, not a lambda: clang 14 cannot capture structured bindings
    for (const auto& t : targets) targeted = targeted || target_matches(w.path, t);
    if (!targeted || w.adapter->a.defined()) continue;
    const at::IntArrayRef shape = w.weight.sizes();
    const bool stacked = shape.size() == 3;
    const int64_t experts = stacked ? shape[0] : 1;
    const int64_t out = shape[stacked ? 1 : 0], in = shape[stacked ? 2 : 1];
    const at::Device device = w.weight.dense.defined() ? w.weight.dense.device() : w.weight.quantized->device();
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));  // kaiming_uniform_(a=sqrt(5)), as PEFT
    auto holder = std::make_shared<torch::nn::Module>();
    const at::Tensor a = at::empty({experts * rank, in}, at::kFloat).uniform_(-bound, bound, gen);
    w.adapter->a = holder->register_parameter("lora_A", a.to(device));
    w.adapter->b =
        holder->register_parameter("lora_B", at::zeros({out, experts * rank}, at::TensorOptions().device(device)));
    w.adapter->scaling = alpha / static_cast<double>(rank);
    w.adapter->experts = experts;
    w.owner->register_module(w.holder, holder);
    ++added;
  }
  return added;
}

std::vector<std::pair<std::string, at::Tensor>> moe_adapter_tensors(const Transformer& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  const auto weights = moe_weights(model);
  for (size_t k = 0; k + 2 < weights.size(); k += 3) {
    const auto& gate_up = *weights[k].adapter;
    const auto& down = *weights[k + 1].adapter;
    const auto& router = *weights[k + 2].adapter;
    const std::string experts = weights[k].path.substr(0, weights[k].path.rfind('.'));  // model.layers.N.mlp.experts
    // PEFT wraps gate_up_proj first and down_proj around it: the inner wrapper is the outer one's base_layer.
    const bool nested = gate_up.a.defined() && down.a.defined();
    if (gate_up.a.defined()) push_adapter(out, experts + (nested ? ".base_layer" : ""), gate_up);
    if (down.a.defined()) push_adapter(out, experts, down);
    if (router.a.defined()) push_adapter(out, weights[k + 2].path, router);
  }
  return out;
}

std::vector<std::string> moe_target_parameters(const Transformer& model) {
  std::vector<std::string> out;
  for (const auto& w : moe_weights(model)) {
    if (w.adapter->a.defined() && std::find(out.begin(), out.end(), w.parameter) == out.end()) {
      out.push_back(w.parameter);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<ops::ExpertAdapter*> moe_adapters(Transformer& model) {
  std::vector<ops::ExpertAdapter*> out;
  for (auto& w : moe_weights(model)) {
    if (w.adapter->a.defined()) out.push_back(w.adapter);
  }
  return out;
}

void merge_moe_adapters(Transformer& model) {
  for (auto& w : moe_weights(model)) {
    if (!w.adapter->a.defined()) continue;
    if (!w.weight.dense.defined()) {
      throw Error(std::string("cannot merge a LoRA adapter into the quantized expert weights of ") + w.path,
                  "save the adapter and merge it into the unquantized model (finetune export)");
    }
    {
      at::NoGradGuard no_grad;
      const at::Tensor& dense = w.weight.dense;
      const at::Tensor delta = w.adapter->delta_weight().view(dense.sizes());  // F32
      dense.copy_((dense.to(at::kFloat) + delta).to(dense.scalar_type()));
    }
    w.owner->unregister_module(w.holder);
    *w.adapter = ops::ExpertAdapter{};
  }
}

}  // namespace ft::model
