// PEFT adapter directories: save_adapter writes adapter_config.json and adapter_model.safetensors as PEFT does,
// load_adapter reads them back (also PEFT's other spellings of target_modules and trainable tokens).
#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "io/safe_path.h"
#include "io/safetensors.h"
#include "model/checkpoint_names.h"
#include "model/lora.h"
#include "model/lora_internal.h"
#include "model/moe_lora.h"
#include "util/error.h"
#include "util/file_writer.h"
#include "util/fmt.h"

namespace ft::model {

using namespace lora_detail;  // PEFT's names and the projection walk (lora_internal.h)

namespace {

// Optional fields of adapter_config.json (json::value() trips GCC 12's -Wnull-dereference).
bool opt_bool(const nlohmann::json& j, const char* key, bool fallback) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}
double opt_number(const nlohmann::json& j, const char* key, double fallback) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}

// The longest target_modules regex read (a bound on the regex compiler's recursion).
constexpr size_t kMaxTargetRegex = 256;

// target_modules as one string: PEFT's all-linear, or a regex PEFT matches against whole module paths
// (re.fullmatch); returned as the paths of the projections it matches. A regex that matches modules other than
// the projections (lm_head, norms) names a module we cannot adapt, and matching none is refused too.
std::vector<std::string> regex_targets(const std::string& pattern, const Transformer& model, const std::string& src) {
  if (pattern == kAllLinear) return {pattern};
  // A file from elsewhere: a bounded pattern (the regex compiler recurses on nesting), matched in polynomial time
  // (libstdc++'s breadth-first executor; back-references are refused there) so that no pattern can hang the load.
  if (pattern.size() > kMaxTargetRegex) {
    throw ConfigError(src + ": target_modules regex longer than " + std::to_string(kMaxTargetRegex) + " characters",
                      "list the module names instead");
  }
#ifdef _GLIBCXX_RELEASE
  constexpr auto kFlags = std::regex::ECMAScript | std::regex_constants::__polynomial;
#else
  constexpr auto kFlags = std::regex::ECMAScript;
#endif
  std::regex re;
  try {
    re = std::regex(pattern, kFlags);
  } catch (const std::regex_error& e) {
    throw ConfigError(src + ": target_modules regex \"" + pattern + "\" does not compile (" + e.what() + ")");
  }
  const ModelArgs& args = model.args();
  for (const char* other : {"lm_head", "model.embed_tokens", "model.norm"}) {
    if (std::regex_match(transformers_module_path(other, args), re)) {
      throw ConfigError(
          src + ": target_modules regex \"" + pattern + "\" matches " + other + ", which this build cannot adapt",
          "LoRA adapts the attention and MLP projections only");
    }
  }
  std::vector<std::string> paths;
  for (const auto& [path, lin] : model.projections()) {
    if (std::regex_match(transformers_module_path(path, args), re)) paths.push_back(path);
  }
  if (paths.empty()) {
    throw ConfigError(src + ": target_modules regex \"" + pattern + "\" matches none of the model's projections",
                      "PEFT matches it against whole module paths such as " +
                          transformers_module_path("model.layers.0.self_attn.q_proj", args));
  }
  return paths;
}

std::vector<int64_t> index_list(const nlohmann::json& v, const std::string& where) {
  if (!v.is_array()) throw ConfigError(where + " must be a list of token ids");
  std::vector<int64_t> ids;
  for (const auto& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0) throw ConfigError(where + " must hold token ids >= 0");
    ids.push_back(x.get<int64_t>());
  }
  std::vector<int64_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw ConfigError(where + " lists a token id twice");
  }
  return ids;
}

// The token rows of `holder` (`path`: model.embed_tokens or lm_head) from the adapter file: rows stored in the
// order of `file_ids`, the holder's rows sorted by id.
void load_token_rows(WeightHolder& holder, const std::string& path, const ModelArgs& args,
                     const std::vector<int64_t>& file_ids, io::SafetensorsFile& st, const std::filesystem::path& file) {
  const std::string name = peft_module(path, args) + kTokenDelta;
  if (!st.contains(name)) throw Error("missing tensor '" + name + "' in " + file.string());
  const std::vector<int64_t> want{static_cast<int64_t>(file_ids.size()), holder.weight.size(1)};
  if (st.info(name).shape != want) {
    throw Error("tensor '" + name + "' in " + file.string() + " does not hold one row of " + std::to_string(want[1]) +
                " per id of trainable_token_indices");
  }
  std::vector<int64_t> order;  // file row of each sorted id
  for (int64_t id : holder.token_ids()) {
    order.push_back(std::find(file_ids.begin(), file_ids.end(), id) - file_ids.begin());
  }
  at::NoGradGuard no_grad;
  holder.token_rows.copy_(st.tensor(name).index_select(0, at::tensor(order, at::kLong)));
}

// adapter_config.json's target_modules for `targets` (names, paths or path tails of ours). PEFT matches a list in
// every part of a model; in a multimodal one the vision tower has self_attn.q_proj, k_proj and v_proj too, so there
// the targets become one regex over the language model's modules, or, past the regex length loadable here
// (regex_targets), the list of every adapted module's full path.
nlohmann::json target_modules(const std::vector<std::string>& targets, const Transformer& model) {
  const ModelArgs& args = model.args();
  if (args.multimodal_type.empty()) return targets;
  std::string alternatives;
  for (const auto& t : targets) {
    const std::string tail = t.rfind("model.", 0) == 0 ? t.substr(6) : t;  // a path below the language model
    std::string escaped;
    for (const char c : tail) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') escaped += '\\';
      escaped += c;
    }
    alternatives += (alternatives.empty() ? "" : "|") + escaped;
  }
  const std::string pattern = R"(model\.language_model\.(.*\.)?()" + alternatives + ")";
  if (pattern.size() <= kMaxTargetRegex) return pattern;
  std::vector<std::string> paths;
  for (const auto& [path, lin] : model.projections()) {
    if (lin->has_lora()) paths.push_back(transformers_module_path(path, args));
  }
  return paths;
}

}  // namespace

ModelFiles adapter_files(const Transformer& model, const ft::LoraConfig& cfg,
                         const std::string& base_model_name_or_path) {
  ModelFiles files{adapter_tensors(model), model.args(), nullptr};
  FT_CHECK(!files.tensors.empty(), "save_adapter: the model has no LoRA adapters or token rows (apply_lora first)");
  for (auto& [name, t] : files.tensors) t = t.detach().to(at::kFloat);
  std::vector<std::string> targets = resolve_lora_targets(cfg.targets, model.args());  // as PEFT saves all-linear
  const bool moe = model.args().num_experts > 0;
  // MoE models: the experts' and routers' adapters are PEFT's target_parameters, the rest its target_modules.
  if (moe) targets.erase(std::remove_if(targets.begin(), targets.end(), is_moe_target), targets.end());
  std::sort(targets.begin(), targets.end());
  nlohmann::json j = {{"peft_type", "LORA"},
                      {"task_type", "CAUSAL_LM"},
                      {"base_model_name_or_path", base_model_name_or_path},
                      {"r", cfg.rank},
                      {"lora_alpha", cfg.alpha},
                      {"lora_dropout", cfg.dropout},
                      {"target_modules", target_modules(targets, model)},
                      {"bias", "none"},
                      {"fan_in_fan_out", false},
                      {"inference_mode", true},
                      {"init_lora_weights", true},
                      {"use_rslora", false},
                      {"use_dora", false},
                      {"modules_to_save", nullptr},
                      {"layers_to_transform", nullptr},
                      {"rank_pattern", nlohmann::json::object()},
                      {"alpha_pattern", nlohmann::json::object()},
                      {"revision", nullptr}};
  if (moe && !moe_target_parameters(model).empty()) j["target_parameters"] = moe_target_parameters(model);
  // The rows of added tokens, as PEFT's trainable_token_indices: a list trains the input embedding (and a tied LM
  // head with it); untied models name both modules.
  const auto& embed_ids = model.embed_tokens().token_ids();
  const std::vector<int64_t> lm_ids =
      model.lm_head() != nullptr ? model.lm_head()->token_ids() : std::vector<int64_t>();
  if (!lm_ids.empty()) {
    j["trainable_token_indices"] = {{"embed_tokens", embed_ids}, {"lm_head", lm_ids}};
    if (embed_ids.empty()) j["trainable_token_indices"].erase("embed_tokens");
  } else if (!embed_ids.empty()) {
    j["trainable_token_indices"] = embed_ids;
  }
  files.adapter_config = std::move(j);
  return files;
}

void save_adapter(const Transformer& model, const ft::LoraConfig& cfg, const std::filesystem::path& dir,
                  const std::string& base_model_name_or_path) {
  write_model_files(adapter_files(model, cfg, base_model_name_or_path), dir, /*shard_size_bytes=*/0);
}

namespace {

// adapter_config.json, parsed; `src` names it in messages.
struct AdapterConfigFile {
  nlohmann::json json;
  std::string src;
};

AdapterConfigFile read_adapter_config(const std::filesystem::path& dir) {
  const auto cfg_path = dir / "adapter_config.json";
  std::ifstream in(cfg_path);
  if (!in) throw ConfigError("cannot read " + cfg_path.string(), "--adapter must be a PEFT LoRA adapter directory");
  // An adapter made by someone else must not make us read elsewhere (adapter_model.safetensors -> /dev/zero).
  io::require_inside_model_dir(cfg_path, dir);
  io::require_inside_model_dir(dir / "adapter_model.safetensors", dir);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(cfg_path.string() + ": not valid JSON (" + e.what() + ")");
  }
  return {std::move(j), cfg_path.string()};
}

// PEFT features this loader does not implement: refused, as ignoring them would load a different adapter than the
// one trained.
void check_supported(const nlohmann::json& j, const std::string& src) {
  if (j.contains("peft_type") && j["peft_type"] != "LORA") {
    throw ConfigError(src + ": peft_type " + j["peft_type"].dump() + " is not LORA");
  }
  if (opt_bool(j, "use_dora", false)) throw ConfigError(src + ": use_dora=true (DoRA) is not supported");
  if (j.contains("bias") && j["bias"].is_string() && j["bias"] != "none") {
    throw ConfigError(src + ": bias=\"" + j["bias"].get<std::string>() + "\" is not supported", "use bias=none");
  }
  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    if (j.contains(key) && j[key].is_object() && !j[key].empty()) {
      throw ConfigError(src + ": per-module \"" + std::string(key) + "\" is not supported");
    }
  }
  if (j.contains("modules_to_save") && j["modules_to_save"].is_array() && !j["modules_to_save"].empty()) {
    throw ConfigError(src + ": modules_to_save is not supported (only LoRA matrices are loaded)");
  }
}

// PEFT's target_parameters (adapters on MoE models' expert and router weights: gate_up_proj, down_proj, gate.weight,
// or paths ending in them) as lora.targets: the router's "gate.weight" names its module, gate.
std::vector<std::string> parameter_targets(const nlohmann::json& j, const std::string& src) {
  std::vector<std::string> out;
  if (!j.contains("target_parameters") || j["target_parameters"].is_null()) return out;
  if (!j["target_parameters"].is_array()) throw ConfigError(src + ": target_parameters must be a list of names");
  for (const auto& p : j["target_parameters"]) {
    if (!p.is_string()) throw ConfigError(src + ": target_parameters must be a list of names");
    std::string name = p.get<std::string>();
    const std::string weight = ".weight";
    if (name.size() > weight.size() && name.compare(name.size() - weight.size(), weight.size(), weight) == 0) {
      name.resize(name.size() - weight.size());
    }
    if (!is_moe_target(name)) {
      throw ConfigError(src + ": target_parameters entry \"" + p.get<std::string>() + "\" is not supported",
                        "this build adapts the weights of MoE experts (gate_up_proj, down_proj) and routers (gate)");
    }
    out.push_back(name);
  }
  return out;
}

// r, lora_alpha and target_modules (a regex already matched against `model`'s projections).
ft::LoraConfig required_fields(const nlohmann::json& j, const Transformer& model, const std::string& src) {
  auto need = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key) || j[key].is_null()) throw ConfigError(src + ": missing field \"" + key + "\"");
    return j[key];
  };
  ft::LoraConfig cfg;
  cfg.enabled = true;
  try {
    const auto& r = need("r");
    if (!r.is_number_integer()) throw ConfigError(src + ": r must be an integer");  // a float: unchecked UB
    cfg.rank = r.get<int64_t>();
    cfg.alpha = need("lora_alpha").get<double>();
    const auto& targets = need("target_modules");
    if (targets.is_string()) {
      cfg.targets = regex_targets(targets.get<std::string>(), model, src);
    } else if (targets.is_array()) {
      cfg.targets.clear();  // LoraConfig's default targets are not the file's
      for (const auto& t : targets.get<std::vector<std::string>>()) {
        cfg.targets.push_back(module_path_from_transformers(t, model.args()));
      }
    } else {
      throw ConfigError(src + ": target_modules must be a list of module names or a regex string");
    }
    for (auto& t : parameter_targets(j, src)) cfg.targets.push_back(std::move(t));
  } catch (const nlohmann::json::exception& e) {  // r, lora_alpha or a target of the wrong JSON type
    throw ConfigError(src + ": a field has an unexpected type (" + e.what() + ")",
                      "compare it with the adapter_config.json PEFT writes");
  }
  return cfg;
}

// The adapter's LoRA settings, checked against `model`.
ft::LoraConfig lora_config(const nlohmann::json& j, const Transformer& model, const std::string& src) {
  check_supported(j, src);
  ft::LoraConfig cfg = required_fields(j, model, src);
  cfg.dropout = opt_number(j, "lora_dropout", 0.0);
  cfg.targets = resolve_lora_targets(cfg.targets, model.args());
  check_targets(cfg.targets, model, src + " target_modules");
  // A rank beyond the projection's own dims adds nothing; the bound keeps a damaged file from sizing huge matrices.
  if (cfg.rank < 1 || cfg.rank > model.args().hidden_size) {
    throw ConfigError(src + ": r " + std::to_string(cfg.rank) + " must be in [1, hidden_size " +
                      std::to_string(model.args().hidden_size) + "]");
  }
  return cfg;
}

// rsLoRA scales by alpha / sqrt(r); add_lora divides by r, so hand it alpha * sqrt(r).
double scaling_alpha(const nlohmann::json& j, const ft::LoraConfig& cfg) {
  return opt_bool(j, "use_rslora", false) ? cfg.alpha * std::sqrt(static_cast<double>(cfg.rank)) : cfg.alpha;
}

// The added tokens' ids of trainable_token_indices. `tied`: the model has no LM head of its own, so `lm` is empty
// and the embedding's rows serve both.
struct TokenIds {
  std::vector<int64_t> embed, lm;
  bool tied = false;
};

// trainable_token_indices (added tokens): a list for the input embedding (a tied LM head follows it), or
// {"embed_tokens": [...], "lm_head": [...]}.
TokenIds parse_token_ids(const nlohmann::json& j, const std::string& src) {
  TokenIds ids;
  if (!j.contains("trainable_token_indices") || j["trainable_token_indices"].is_null()) return ids;
  const auto& t = j["trainable_token_indices"];
  const std::string where = src + ": trainable_token_indices";
  if (t.is_array()) {
    ids.embed = index_list(t, where);
  } else if (t.is_object()) {
    for (const auto& [key, value] : t.items()) {
      if (key == "embed_tokens" || key == kEmbedPath) {
        ids.embed = index_list(value, where + "." + key);
      } else if (key == kLmHeadPath) {
        ids.lm = index_list(value, where + "." + key);
      } else {
        throw ConfigError(where + ": module '" + key + "' is not supported", "use embed_tokens and lm_head");
      }
    }
  } else {
    throw ConfigError(where + " must be a list of token ids or an object of module -> ids");
  }
  return ids;
}

TokenIds token_ids(const nlohmann::json& j, const Transformer& model, const std::string& src) {
  TokenIds ids = parse_token_ids(j, src);
  ids.tied = model.lm_head() == nullptr;
  if (ids.tied && !ids.lm.empty()) {
    std::vector<int64_t> a = ids.embed, b = ids.lm;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (a != b) {
      throw ConfigError(src +
                        ": trainable_token_indices gives the LM head other ids than the embedding, but this "
                        "model ties them");
    }
    ids.lm.clear();  // the tied LM head is the embedding
  }
  return ids;
}

// The vocabulary the adapter was trained with: its ids, and PEFT's saved resized matrices where present. New ids
// extend the vocabulary: one far past it (the rows in between would be allocated) is refused.
int64_t adapter_vocab(const Transformer& model, const TokenIds& ids, const io::SafetensorsFile& st,
                      const std::filesystem::path& file, const std::string& src) {
  int64_t vocab = model.args().vocab_size;
  const int64_t max_id = model.args().vocab_size + static_cast<int64_t>(ids.embed.size() + ids.lm.size()) + 1024;
  for (const auto* list : {&ids.embed, &ids.lm}) {
    for (int64_t id : *list) {
      if (id >= max_id) {
        throw ConfigError(src + ": trainable_token_indices lists id " + std::to_string(id) + ", far beyond the " +
                          std::to_string(model.args().vocab_size) + " tokens of the base model");
      }
      vocab = std::max(vocab, id + 1);
    }
  }
  const ModelArgs& args = model.args();
  for (const auto& name : {peft_module(kEmbedPath, args) + kTokenBase, peft_module(kLmHeadPath, args) + kTokenBase}) {
    if (!st.contains(name)) continue;
    const auto& shape = st.info(name).shape;
    if (shape.size() != 2 || shape[1] != model.args().hidden_size) {
      throw Error("tensor '" + name + "' in " + file.string() + " is not a [vocab, hidden_size] matrix");
    }
    vocab = std::max(vocab, shape[0]);
  }
  return vocab;
}

// Grows the model to `vocab` rows and copies in PEFT's saved resized matrices (checked by adapter_vocab).
void install_token_matrices(Transformer& model, int64_t vocab, const io::SafetensorsFile& st) {
  if (vocab > model.args().vocab_size) model.resize_token_embeddings(vocab);
  at::NoGradGuard no_grad;
  const ModelArgs& args = model.args();
  for (const auto& [name, holder] : {std::pair{peft_module(kEmbedPath, args) + kTokenBase, &model.embed_tokens()},
                                     {peft_module(kLmHeadPath, args) + kTokenBase, model.lm_head()}}) {
    if (holder == nullptr || !st.contains(name) || holder->has_token_rows()) continue;  // resumed: rows hold them
    const at::Tensor w = st.tensor(name);
    holder->weight.narrow(0, 0, w.size(0)).copy_(w);
  }
}

// Token rows for the adapter's ids; a model that already has rows (resumed) must have the same ids.
void attach_token_rows(Transformer& model, const TokenIds& ids, const std::string& src) {
  auto attach = [&](WeightHolder* holder, const std::vector<int64_t>& list, const std::string& what) {
    if (holder == nullptr || list.empty()) return;
    std::vector<int64_t> sorted = list;
    std::sort(sorted.begin(), sorted.end());
    if (!holder->has_token_rows()) {
      holder->add_token_rows(sorted);
    } else if (holder->token_ids() != sorted) {
      throw ConfigError(src + ": trainable_token_indices of " + what + " differ from the model's token rows");
    }
  };
  attach(&model.embed_tokens(), ids.embed, "embed_tokens");
  attach(model.lm_head(), ids.lm, "lm_head");
}

// The LoRA matrices the model now expects from the file; token rows load apart, by id (load_token_rows).
std::map<std::string, at::Tensor> lora_tensors(const Transformer& model) {
  std::map<std::string, at::Tensor> wanted;
  for (const auto& [name, t] : adapter_tensors(model)) {
    if (name.find(kTokenDelta) == std::string::npos) wanted.emplace(name, t);
  }
  return wanted;
}

// What does not fit: tensors of the file that this model has no place for, and wanted ones missing or shaped
// otherwise.
std::vector<std::string> misfits(const std::map<std::string, at::Tensor>& wanted, const TokenIds& ids,
                                 const io::SafetensorsFile& st, int64_t rank, const ModelArgs& args) {
  std::vector<std::string> out;
  const std::string embed = peft_module(kEmbedPath, args), lm_head = peft_module(kLmHeadPath, args);
  for (const auto& name : st.names()) {
    const bool token_tensor = name == embed + kTokenBase || name == lm_head + kTokenBase ||
                              (name == embed + kTokenDelta && !ids.embed.empty()) ||
                              (name == lm_head + kTokenDelta && (!ids.lm.empty() || ids.tied));
    if (!wanted.count(name) && !token_tensor) out.push_back("'" + name + "' has no place in this model");
  }
  for (const auto& [name, param] : wanted) {
    if (!st.contains(name)) {
      out.push_back("'" + name + "' is missing");
    } else if (st.info(name).shape != param.sizes().vec()) {
      out.push_back(fmt::format("'{}' is [{}], this model needs [{}] for r={}", name,
                                fmt::join(st.info(name).shape, ", "), fmt::join(param.sizes(), ", "), rank));
    }
  }
  return out;
}

// Every tensor that does not fit this base (another model's adapter): all named at once, before anything loads.
void check_fit(const Transformer& model, const std::map<std::string, at::Tensor>& wanted, const TokenIds& ids,
               const io::SafetensorsFile& st, const std::filesystem::path& file, int64_t rank) {
  const std::vector<std::string> found = misfits(wanted, ids, st, rank, model.args());
  if (found.empty()) return;
  std::string list;
  for (size_t i = 0; i < found.size() && i < 4; ++i) list += "\n    " + found[i];
  if (found.size() > 4) list += fmt::format("\n    ... and {} more", found.size() - 4);
  const auto& a = model.args();
  // PEFT adapters made with a list of names on a multimodal model adapt its vision tower too, which we keep frozen.
  const bool vision = std::any_of(found.begin(), found.end(), [](const std::string& f) {
    return f.find("vision_tower.") != std::string::npos || f.find("multi_modal_projector.") != std::string::npos;
  });
  throw ConfigError(fmt::format("{} does not fit the base model ({}, hidden_size {}, {} layers): {} of its tensors "
                                "do not match:{}",
                                file.string(), a.model_type, a.hidden_size, a.num_layers, found.size(), list),
                    vision ? "the adapter also adapts the vision tower, which finetune runs without; merge it with "
                             "PEFT, or train one on the language model only (target_modules as a regex over "
                             "model.language_model)"
                           : "pass the base model the adapter was trained on (adapter_config.json "
                             "base_model_name_or_path)");
}

void load_tensors(Transformer& model, const TokenIds& ids, std::map<std::string, at::Tensor>& wanted,
                  io::SafetensorsFile& st, const std::filesystem::path& file) {
  if (!ids.embed.empty()) load_token_rows(model.embed_tokens(), kEmbedPath, model.args(), ids.embed, st, file);
  if (!ids.lm.empty()) load_token_rows(*model.lm_head(), kLmHeadPath, model.args(), ids.lm, st, file);
  at::NoGradGuard no_grad;
  for (auto& [name, param] : wanted) param.copy_(st.tensor(name));
}

}  // namespace

// The stages alternate between checking and changing the model rather than checking everything first: the file's
// tensors can only be matched against adapters and token rows that exist, and the order of the checks is what
// users see when an adapter has several faults.
ft::LoraConfig load_adapter(Transformer& model, const std::filesystem::path& dir) {
  const AdapterConfigFile conf = read_adapter_config(dir);
  ft::LoraConfig cfg = lora_config(conf.json, model, conf.src);
  add_adapters(model, cfg.targets, cfg, scaling_alpha(conf.json, cfg), 0);

  const auto file = dir / "adapter_model.safetensors";
  if (std::error_code ec;
      !std::filesystem::exists(file, ec) && std::filesystem::exists(dir / "adapter_model.bin", ec)) {
    throw ConfigError(dir.string() + " holds adapter_model.bin, a PyTorch pickle, which finetune does not read",
                      fmt::format("convert it once: python -c \"import torch; from safetensors.torch import save_file; "
                                  "save_file(torch.load('{0}/adapter_model.bin'), '{0}/adapter_model.safetensors')\"",
                                  dir.string()));
  }
  io::SafetensorsFile st(file);
  st.rename([&](const std::string& name) { return adapter_key_from_transformers4(name, model.args()); });
  const TokenIds ids = token_ids(conf.json, model, conf.src);
  install_token_matrices(model, adapter_vocab(model, ids, st, file, conf.src), st);
  attach_token_rows(model, ids, conf.src);

  std::map<std::string, at::Tensor> wanted = lora_tensors(model);
  check_fit(model, wanted, ids, st, file, cfg.rank);
  load_tensors(model, ids, wanted, st, file);
  return cfg;
}

}  // namespace ft::model
