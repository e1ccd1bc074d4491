#include "model/lora.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "model/checkpoint_names.h"
#include "model/lora_internal.h"
#include "model/moe_lora.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::model {
namespace lora_detail {

std::string peft_module(const std::string& path, const ModelArgs& args) {
  return kPeftPrefix + transformers_module_path(path, args);
}

bool target_matches(const std::string& path, const std::string& target) {
  return path == target ||
         (path.size() > target.size() && path.compare(path.size() - target.size(), target.size(), target) == 0 &&
          path[path.size() - target.size() - 1] == '.');
}

// The per-expert names of transformers 4 checkpoints: PEFT (0.21, on transformers 5) turns them into adapters on
// the fused expert weights, gate_proj and up_proj into one of twice the rank on gate_up_proj; here the fused names
// are the targets. (An MoE model's dense layers, qwen3_moe's mlp_only_layers, take no MLP adapters: PEFT's
// conversion moves those names to the experts too.)
void check_not_per_expert_names(const std::string& target, const ModelArgs& args, const std::string& where) {
  if (args.num_experts <= 0) return;
  for (const std::string name : {"gate_proj", "up_proj", "w1", "w2", "w3"}) {
    if (target_matches(target, name)) {
      throw ConfigError(where + ": '" + target + "' names one projection of the experts of " + args.model_type +
                            ", which transformers 5 fuses",
                        "name the fused weights: gate_up_proj (gate and up), down_proj, and gate for the router");
    }
  }
}

// Whether target `t` adapts something of `model`: an attention or MLP projection (MoE models: attention only), or an
// MoE model's experts or routers.
bool target_found(const std::string& t, const Transformer& model,
                  const std::vector<std::pair<std::string, Linear>>& paths) {
  const bool moe = model.args().num_experts > 0;
  if (moe && is_moe_target(t)) return true;
  return std::any_of(paths.begin(), paths.end(), [&](const auto& p) {
    return (!moe || p.first.find(".self_attn.") != std::string::npos) && target_matches(p.first, t);
  });
}

void check_targets(const std::vector<std::string>& targets, const Transformer& model, const std::string& where) {
  const ModelArgs& args = model.args();
  const auto ok = lora_target_names(args);
  std::string list;
  for (const auto& n : ok) list += (list.empty() ? "" : ", ") + n;
  if (targets.empty()) throw ConfigError(where + ": no LoRA targets", "list some of " + list + ", or all-linear");
  const auto paths = model.projections();
  for (const auto& t : targets) {
    check_not_per_expert_names(t, args, where);
    if (!target_found(t, model, paths)) {
      throw ConfigError(where + ": " + args.model_type + " has no projection '" + t + "' to adapt",
                        "its projections: " + list +
                            (args.fused_projections ? " (q/k/v are one qkv_proj and gate/up one gate_up_proj)" : "") +
                            "; all-linear adapts them all, and a dotted path (model.layers.3.mlp.down_proj) one "
                            "layer's");
    }
  }
}

void add_adapters(Transformer& model, const std::vector<std::string>& targets, const ft::LoraConfig& cfg,
                  double scaling_alpha, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const bool moe = model.args().num_experts > 0;
  for (auto& [path, lin] : model.projections()) {
    if (moe && path.find(".self_attn.") == std::string::npos) continue;  // check_not_per_expert_names
    bool targeted = false;  // a loop, not a lambda: clang 14 (the fuzz build) cannot capture structured bindings
    for (const auto& t : targets) targeted = targeted || target_matches(path, t);
    if (targeted && !lin->has_lora()) lin->add_lora(cfg.rank, scaling_alpha, cfg.dropout, gen);
  }
  if (!moe) return;
  const bool experts = add_moe_adapters(model, targets, cfg.rank, scaling_alpha, gen) > 0;
  if (experts && cfg.dropout > 0.0) {
    throw ConfigError("lora.dropout " + std::to_string(cfg.dropout) + " with adapters on experts or routers",
                      "PEFT's adapters on weights (target_parameters) have no dropout: set lora.dropout: 0");
  }
}

}  // namespace lora_detail

namespace {

// Each layer's grouped projections of the frozen base (q/k/v, gate/up) share one weight buffer: one GEMM per group
// and direction (join_frozen_weights).
void join_frozen_groups(Transformer& model) {
  for (int64_t i = 0; i < model.args().num_layers; ++i) {
    DecoderLayer layer = model.layer(i);
    auto& attn = *layer->self_attn;
    if (attn.q_proj && attn.k_proj && attn.v_proj) {
      join_frozen_weights({attn.q_proj.get(), attn.k_proj.get(), attn.v_proj.get()});
    }
    if (!layer->mlp) continue;  // an MoE layer: its experts are 3-D weights, not projections
    auto& mlp = *layer->mlp;
    if (mlp.gate_proj && mlp.up_proj) join_frozen_weights({mlp.gate_proj.get(), mlp.up_proj.get()});
  }
}

}  // namespace

using namespace lora_detail;  // PEFT's names and the projection walk (lora_internal.h)

std::vector<std::string> lora_target_names(const ModelArgs& args) {
  if (args.fused_projections) return {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
  if (args.num_experts > 0) return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj", "gate"};
  return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
}

std::vector<std::string> resolve_lora_targets(const std::vector<std::string>& targets, const ModelArgs& args) {
  if (std::find(targets.begin(), targets.end(), kAllLinear) == targets.end()) return targets;
  if (targets.size() != 1) throw ConfigError("lora.targets: all-linear adapts every projection; list nothing else");
  return lora_target_names(args);
}

void check_lora_settings(const Transformer& model, const ft::LoraConfig& cfg) {
  check_targets(resolve_lora_targets(cfg.targets, model.args()), model, "lora.targets");
  if (cfg.rank < 1) throw ConfigError("lora.rank must be >= 1 (got " + std::to_string(cfg.rank) + ")");
  if (cfg.dropout < 0.0 || cfg.dropout >= 1.0) throw ConfigError("lora.dropout must be in [0, 1)");
}

void apply_lora(Transformer& model, const ft::LoraConfig& cfg, uint64_t seed) {
  check_lora_settings(model, cfg);
  const auto targets = resolve_lora_targets(cfg.targets, model.args());
  for (auto& p : model.parameters()) p.set_requires_grad(false);
  add_adapters(model, targets, cfg, cfg.alpha, seed);
  join_frozen_groups(model);
}

std::vector<at::Tensor> trainable_parameters(Transformer& model) {
  std::vector<at::Tensor> out;
  for (auto& p : model.parameters()) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> adapter_tensors(const Transformer& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  const ModelArgs& args = model.args();
  for (const auto& [path, lin] : model.projections()) {
    if (!lin->has_lora()) continue;
    out.emplace_back(peft_module(path, args) + ".lora_A.weight", lin->lora_a);
    out.emplace_back(peft_module(path, args) + ".lora_B.weight", lin->lora_b);
  }
  if (model.embed_tokens().has_token_rows()) {
    out.emplace_back(peft_module(kEmbedPath, args) + kTokenDelta, model.embed_tokens().token_rows);
  }
  if (model.lm_head() != nullptr && model.lm_head()->has_token_rows()) {
    out.emplace_back(peft_module(kLmHeadPath, args) + kTokenDelta, model.lm_head()->token_rows);
  }
  for (auto& named : moe_adapter_tensors(model)) out.push_back(std::move(named));
  return out;
}

void merge_lora(Transformer& model) {
  for (auto& [path, lin] : model.projections()) lin->merge_lora();
  merge_moe_adapters(model);
  model.merge_token_rows();
}

AdaptersDisabled::AdaptersDisabled(Transformer& model) {
  for (auto& [name, linear] : model.projections()) {
    if (!linear->has_lora()) continue;
    adapters_.push_back({linear.get(), linear->lora_a, linear->lora_b});
    linear->lora_a = at::Tensor();
    linear->lora_b = at::Tensor();
  }
  for (WeightHolder* holder : {&model.embed_tokens(), model.lm_head()}) {
    if (holder == nullptr || !holder->has_token_rows()) continue;
    token_rows_.emplace_back(holder, holder->token_rows);
    holder->token_rows = at::Tensor();
  }
  for (ops::ExpertAdapter* adapter : moe_adapters(model)) {
    moe_adapters_.emplace_back(adapter, std::exchange(*adapter, {}));
  }
}

AdaptersDisabled::~AdaptersDisabled() {
  for (auto& a : adapters_) {
    a.layer->lora_a = std::move(a.lora_a);
    a.layer->lora_b = std::move(a.lora_b);
  }
  for (auto& [holder, rows] : token_rows_) holder->token_rows = std::move(rows);
  for (auto& [adapter, saved] : moe_adapters_) *adapter = std::move(saved);
}

}  // namespace ft::model
