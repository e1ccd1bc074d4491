// Parity with Hugging Face transformers and PEFT on tiny random models of each family (CPU, F32):
// logits, greedy generation, packing, and models/adapters we save loading back in Python.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/checkpoint_names.h"
#include "model/generate.h"
#include "model/lora.h"
#include "model/pretrained.h"
#include "model/reference.h"
#include "model/tiny_config.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

constexpr double kTol = 1e-4;  // max abs logit difference allowed in F32

class Parity : public ::testing::TestWithParam<std::string> {
 protected:
  std::filesystem::path dir() const { return reference_dir() / GetParam(); }
  std::filesystem::path model_dir() const { return dir() / "model"; }
  io::TensorMap ref() const { return io::read_safetensors(dir() / "ref.safetensors"); }
};

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
}

// LoRA r4 on every projection, with B drawn nonzero so that the adapter matters.
LoraConfig add_adapters_with_nonzero_b(model::Transformer& model) {
  LoraConfig lora;
  lora.enabled = true;
  lora.rank = 4;
  lora.alpha = 8.0;
  lora.targets = model::lora_target_names(model.args());
  model::apply_lora(model, lora, 7);
  at::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  for (auto& [name, t] : model::adapter_tensors(model)) {
    if (name.find("lora_B") != std::string::npos) t.normal_(0.0, 0.2, gen);
  }
  return lora;
}

TEST_P(Parity, LogitsMatchTransformers) {
  auto model = model::load_pretrained(model_dir(), at::kCPU, at::kFloat);
  const auto r = ref();
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(r.at("input_ids"));
  EXPECT_LT(max_diff(logits, r.at("logits")), kTol);
}

TEST_P(Parity, GreedyGenerationMatchesTransformers) {
  auto model = model::load_pretrained(model_dir(), at::kCPU, at::kFloat);
  const auto j = nlohmann::json::parse(read_file(dir() / "ref.json"));
  model::GenerateOptions opts;
  opts.max_new_tokens = 32;
  const auto out = model::generate(*model, j["prompt"].get<std::vector<int64_t>>(), opts);
  EXPECT_EQ(out, j["generated"].get<std::vector<int64_t>>());
}

TEST_P(Parity, PackedRowMatchesEachSequenceAlone) {
  auto model = model::load_pretrained(model_dir(), at::kCPU, at::kFloat);
  const auto r = ref();
  const at::Tensor a = r.at("a_ids"), b = r.at("b_ids");  // I64 [1, 9], [1, 11]
  const int64_t na = a.size(1), nb = b.size(1);
  const at::Tensor ids = at::cat({a, b}, 1);
  const at::Tensor pos = at::cat({at::arange(na), at::arange(nb)}).unsqueeze(0);
  const at::Tensor seg = at::cat({at::zeros({na}, at::kInt), at::ones({nb}, at::kInt)}).unsqueeze(0);
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(ids, pos, seg);
  EXPECT_LT(max_diff(logits.narrow(1, 0, na), r.at("a_logits")), kTol);
  EXPECT_LT(max_diff(logits.narrow(1, na, nb), r.at("b_logits")), kTol);
}

// Saves the model (sharded for llama), a LoRA adapter with nonzero B, and the merged model; transformers/PEFT must
// compute the same logits from each.
TEST_P(Parity, SavedModelAdapterAndMergedExportLoadInTransformers) {
  TempDir out("ft-model-save");
  auto model = model::load_pretrained(model_dir(), at::kCPU, at::kFloat);
  const auto r = ref();
  const at::Tensor ids = r.at("input_ids");
  const int64_t shard = GetParam() == "llama" ? 64 * 1024 : 0;
  model::save_pretrained(*model, out / "saved", shard);
  if (shard > 0) {
    ASSERT_TRUE(std::filesystem::exists(out / "saved" / "model.safetensors.index.json"));
  }

  const LoraConfig lora = add_adapters_with_nonzero_b(*model);
  at::Tensor ours_adapter;
  {
    at::NoGradGuard no_grad;
    ours_adapter = model->forward(ids);
  }
  EXPECT_GT(max_diff(ours_adapter, r.at("logits")), 1e-2) << "adapter had no effect";
  model::save_adapter(*model, lora, out / "adapter", (out / "saved").string());
  model::merge_lora(*model);
  EXPECT_TRUE(model::adapter_tensors(*model).empty());
  model::save_pretrained(*model, out / "merged", 0);
  io::write_safetensors(out / "ids.safetensors", {{"input_ids", ids}});

  nlohmann::json jobs = nlohmann::json::array();
  jobs.push_back({{"model", (out / "saved").string()}, {"ids", (out / "ids.safetensors").string()},
                  {"out", (out / "saved.safetensors").string()}});
  jobs.push_back({{"model", (out / "saved").string()}, {"adapter", (out / "adapter").string()},
                  {"ids", (out / "ids.safetensors").string()}, {"out", (out / "peft.safetensors").string()}});
  jobs.push_back({{"model", (out / "merged").string()}, {"ids", (out / "ids.safetensors").string()},
                  {"out", (out / "merged.safetensors").string()}});
  const auto res = run(ref_python() + " " + shell_quote(ref_script()) + " logits --jobs " + shell_quote(jobs.dump()));
  ASSERT_EQ(res.exit_code, 0) << res.output;
  EXPECT_LT(max_diff(io::read_safetensors(out / "saved.safetensors").at("logits"), r.at("logits")), kTol);
  EXPECT_LT(max_diff(io::read_safetensors(out / "peft.safetensors").at("logits"), ours_adapter), kTol);
  EXPECT_LT(max_diff(io::read_safetensors(out / "merged.safetensors").at("logits"), ours_adapter), kTol);
}

// A family's checkpoint with one of its own tensors missing or misshapen (the last layer's norm after the MLP: Gemma's
// post_feedforward_layernorm, elsewhere post_attention_layernorm; and the first layer's value or fused qkv
// projection): `finetune generate` exits 2 naming the tensor and both shapes, as load_pretrained does for training.
TEST_P(Parity, MissingOrMisshapenTensorExitsTwoNamingIt) {
  TempDir tmp("ft-family-broken");
  const auto args = model::load_hf_config(model_dir());
  const auto stored = [&](const std::string& name) { return model::stored_parts(name, args)[0][0]; };
  const std::string last = "model.layers." + std::to_string(args.num_layers - 1) + ".";
  const std::string norm =
      stored(last + (args.gemma ? "post_feedforward_layernorm.weight" : "post_attention_layernorm.weight"));
  const std::string proj =
      stored(std::string("model.layers.0.self_attn.") + (args.fused_projections ? "qkv_proj" : "v_proj") + ".weight");
  const auto generate = [&](const std::filesystem::path& dir) {
    return run_finetune("generate --device cpu --prompt-ids '1 2 3' --max-new-tokens 2 --model " +
                        shell_quote(dir.string()));
  };
  for (const bool drop : {true, false}) {
    const auto dir = tmp / (drop ? "missing" : "misshapen");
    std::filesystem::copy(model_dir(), dir, std::filesystem::copy_options::recursive);
    auto tensors = io::read_safetensors(dir / "model.safetensors");
    for (auto& [k, v] : tensors) v = v.clone();  // detach from the mapping before rewriting the file
    ASSERT_TRUE(tensors.count(norm) && tensors.count(proj)) << GetParam();
    const std::vector<int64_t> want = tensors.at(proj).sizes().vec();
    if (drop) {
      tensors.erase(norm);
    } else {
      tensors[proj] = at::zeros({want[0] + 8, want[1]});
    }
    io::write_safetensors(dir / "model.safetensors", tensors);
    const auto r = generate(dir);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    if (drop) {
      EXPECT_NE(r.output.find("missing tensor '" + norm + "'"), std::string::npos) << r.output;
    } else {
      const std::string shapes = "has shape [" + std::to_string(want[0] + 8) + ", " + std::to_string(want[1]) +
                                 "], the model expects [" + std::to_string(want[0]) + ", " + std::to_string(want[1]) +
                                 "]";
      EXPECT_NE(r.output.find("'" + proj + "'"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find(shapes), std::string::npos) << r.output;
    }
  }
}

// The multimodal reference model with rank-4 adapters on `targets` (lora_B drawn, so that they move the logits),
// saved to `dir` as PEFT's files.
std::shared_ptr<model::Transformer> gemma3_mm_with_adapter(const std::vector<std::string>& targets,
                                                           const std::filesystem::path& dir) {
  const auto model_dir = reference_dir() / "gemma3_mm" / "model";
  auto model = model::load_pretrained(model_dir, at::kCPU, at::kFloat);
  LoraConfig lora;
  lora.enabled = true;
  lora.rank = 4;
  lora.alpha = 8.0;
  lora.targets = targets;
  model::apply_lora(*model, lora, 7);
  {
    at::NoGradGuard no_grad;
    for (auto& [name, t] : model::adapter_tensors(*model)) {
      if (name.find("lora_B") != std::string::npos) t.normal_(0.0, 0.2);
    }
  }
  model::save_adapter(*model, lora, dir, model_dir.string());
  return model;
}

// A Gemma 3 multimodal checkpoint saved after training its language model: the vision tower and projector come back
// bit for bit under their names, config.json stays Gemma3ForConditionalGeneration's (transformers reads the saved
// model in SavedModelAdapterAndMergedExportLoadInTransformers).
TEST(Gemma3Multimodal, SavedModelKeepsTheVisionTowerAndProjector) {
  TempDir out("ft-gemma3-mm");
  const auto model_dir = reference_dir() / "gemma3_mm" / "model";
  auto model = model::load_pretrained(model_dir, at::kCPU, at::kFloat);
  model::save_pretrained(*model, out / "saved", 0);
  const auto before = io::read_safetensors(model_dir / "model.safetensors");
  const auto after = io::read_safetensors(out / "saved" / "model.safetensors");
  size_t kept = 0;
  for (const auto& [name, value] : before) {
    if (name.rfind("vision_tower.", 0) != 0 && name.rfind("multi_modal_projector.", 0) != 0) continue;
    ASSERT_TRUE(after.count(name)) << name;
    EXPECT_TRUE(at::equal(after.at(name), value)) << name;
    ++kept;
  }
  EXPECT_GT(kept, 10u);
  EXPECT_EQ(before.size(), after.size());  // the language model under its stored names, tied: no lm_head
  EXPECT_TRUE(after.count("language_model.model.layers.1.self_attn.q_proj.weight"));
  const auto config = nlohmann::json::parse(read_file(out / "saved" / "config.json"));
  EXPECT_EQ(config.at("model_type"), "gemma3");
  EXPECT_EQ(config.at("text_config").at("num_hidden_layers"), 2);
  EXPECT_EQ(config.at("mm_tokens_per_image"), 4);
}

// An adapter saved by PEFT under transformers 4.5x names the modules language_model.model.* and lists plain names as
// target_modules; PEFT under transformers 5 maps its keys, and so do we: the same logits as the adapter in today's
// layout, and as PEFT's on the old file.
TEST(Gemma3Multimodal, AnAdapterOfTransformers4LoadsAsPeftLoadsIt) {
  TempDir out("ft-gemma3-old-adapter");
  const auto model_dir = reference_dir() / "gemma3_mm" / "model";
  gemma3_mm_with_adapter({"q_proj", "v_proj"}, out / "new");
  io::TensorMap old_keys;
  const std::string today = "base_model.model.model.language_model.", before = "base_model.model.language_model.model.";
  for (const auto& [name, value] : io::read_safetensors(out / "new" / "adapter_model.safetensors")) {
    ASSERT_EQ(name.rfind(today, 0), 0u) << name;
    old_keys[before + name.substr(today.size())] = value.clone();
  }
  std::filesystem::create_directories(out / "old");
  io::write_safetensors(out / "old" / "adapter_model.safetensors", old_keys);
  auto config = nlohmann::json::parse(read_file(out / "new" / "adapter_config.json"));
  config["target_modules"] = {"q_proj", "v_proj"};
  write_file(out / "old" / "adapter_config.json", config.dump(2));

  const at::Tensor ids = io::read_safetensors(reference_dir() / "gemma3_mm" / "ref.safetensors").at("input_ids");
  at::Tensor logits[2];
  for (int old = 0; old < 2; ++old) {
    auto m = model::load_pretrained(model_dir, at::kCPU, at::kFloat);
    model::load_adapter(*m, out / (old ? "old" : "new"));
    at::NoGradGuard no_grad;
    logits[old] = m->forward(ids);
  }
  EXPECT_TRUE(at::equal(logits[0], logits[1]));
  io::write_safetensors(out / "ids.safetensors", {{"input_ids", ids}});
  const nlohmann::json jobs = nlohmann::json::array({{{"model", model_dir.string()},
                                                      {"adapter", (out / "old").string()},
                                                      {"ids", (out / "ids.safetensors").string()},
                                                      {"out", (out / "peft.safetensors").string()}}});
  const auto res = run(ref_python() + " " + shell_quote(ref_script()) + " logits --jobs " + shell_quote(jobs.dump()));
  ASSERT_EQ(res.exit_code, 0) << res.output;
  EXPECT_LT(max_diff(io::read_safetensors(out / "peft.safetensors").at("logits"), logits[1]), kTol);
}

// `finetune export --dtype bf16` of an adapter on the multimodal checkpoint (F32): every saved tensor is bf16, the
// vision tower's the stored values rounded once, as transformers saves a model after .to(torch.bfloat16).
TEST(Gemma3Multimodal, ExportWithADtypeCastsTheVisionTowerToo) {
  TempDir out("ft-gemma3-export");
  const auto model_dir = reference_dir() / "gemma3_mm" / "model";
  gemma3_mm_with_adapter({"q_proj", "v_proj"}, out / "adapter");
  const auto r = run_finetune("export --model " + shell_quote(model_dir.string()) + " --adapter " +
                              shell_quote((out / "adapter").string()) + " --out " +
                              shell_quote((out / "merged").string()) + " --dtype bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto before = io::read_safetensors(model_dir / "model.safetensors");
  const auto after = io::read_safetensors(out / "merged" / "model.safetensors");
  ASSERT_EQ(before.size(), after.size());
  size_t vision = 0;
  for (const auto& [name, value] : after) {
    EXPECT_EQ(value.scalar_type(), at::kBFloat16) << name;
    if (name.rfind("vision_tower.", 0) != 0) continue;
    EXPECT_TRUE(at::equal(value, before.at(name).to(at::kBFloat16))) << name;
    ++vision;
  }
  EXPECT_GT(vision, 10u);
  EXPECT_EQ(nlohmann::json::parse(read_file(out / "merged" / "config.json")).at("dtype"), "bfloat16");
}

// The same checkpoint in transformers 5's in-memory layout (save_original_format=False, or a state_dict:
// model.language_model.*, model.vision_tower.*, model.multi_modal_projector.*) loads to transformers' logits and saves
// in the released layout.
TEST(Gemma3Multimodal, InMemoryLayoutLoadsAndSavesAsTheReleasedOne) {
  TempDir out("ft-gemma3-layout");
  const auto ref_dir = reference_dir() / "gemma3_mm";
  std::filesystem::copy(ref_dir / "model", out / "model", std::filesystem::copy_options::recursive);
  io::TensorMap renamed;
  for (const auto& [name, value] : io::read_safetensors(ref_dir / "model" / "model.safetensors")) {
    const std::string lm = "language_model.model.";
    renamed[name.rfind(lm, 0) == 0 ? "model.language_model." + name.substr(lm.size()) : "model." + name] =
        value.clone();
  }
  io::write_safetensors(out / "model" / "model.safetensors", renamed);
  auto model = model::load_pretrained(out / "model", at::kCPU, at::kFloat);
  const auto r = io::read_safetensors(ref_dir / "ref.safetensors");
  {
    at::NoGradGuard no_grad;
    EXPECT_LT(max_diff(model->forward(r.at("input_ids")), r.at("logits")), kTol);
  }
  model::save_pretrained(*model, out / "saved", 0);
  const auto saved = io::read_safetensors(out / "saved" / "model.safetensors");
  EXPECT_TRUE(saved.count("language_model.model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(saved.count("vision_tower.embeddings.patch_embedding.weight"));
  for (const auto& [name, value] : saved) EXPECT_NE(name.rfind("model.", 0), 0u) << name;
}

// Adapters on a multimodal model name the language model's modules only: target_modules is one regex over
// model.language_model, whether the targets are names, path tails or paths, so PEFT adapts no vision module (its
// SigLIP layers have self_attn.q_proj and v_proj too) and misses no key; its logits equal ours.
TEST(Gemma3Multimodal, AdapterTargetsTheLanguageModelOnly) {
  TempDir out("ft-gemma3-adapter");
  const auto model_dir = reference_dir() / "gemma3_mm" / "model";
  const auto model =
      gemma3_mm_with_adapter({"q_proj", "self_attn.v_proj", "model.layers.1.mlp.down_proj"}, out / "adapter");
  const auto config = nlohmann::json::parse(read_file(out / "adapter" / "adapter_config.json"));
  ASSERT_TRUE(config.at("target_modules").is_string()) << config.dump();
  EXPECT_EQ(config.at("target_modules"),
            R"(model\.language_model\.(.*\.)?(layers\.1\.mlp\.down_proj|q_proj|self_attn\.v_proj))");
  const at::Tensor ids = io::read_safetensors(reference_dir() / "gemma3_mm" / "ref.safetensors").at("input_ids");
  at::Tensor ours;
  {
    at::NoGradGuard no_grad;
    ours = model->forward(ids);
  }
  io::write_safetensors(out / "ids.safetensors", {{"input_ids", ids}});
  const nlohmann::json jobs = nlohmann::json::array({{{"model", model_dir.string()},
                                                      {"adapter", (out / "adapter").string()},
                                                      {"ids", (out / "ids.safetensors").string()},
                                                      {"out", (out / "peft.safetensors").string()}}});
  const auto res = run(ref_python() + " " + shell_quote(ref_script()) + " logits --jobs " + shell_quote(jobs.dump()));
  ASSERT_EQ(res.exit_code, 0) << res.output;
  EXPECT_EQ(res.output.find("issing adapter keys"), std::string::npos) << res.output;
  EXPECT_LT(max_diff(io::read_safetensors(out / "peft.safetensors").at("logits"), ours), kTol);
  auto back = model::load_pretrained(model_dir, at::kCPU, at::kFloat);
  model::load_adapter(*back, out / "adapter");
  std::vector<std::string> adapted;
  for (const auto& [path, lin] : back->projections()) {
    if (lin->has_lora()) adapted.push_back(path);
  }
  EXPECT_EQ(adapted.size(), 5u) << "q_proj and v_proj of both layers, one down_proj";
}

// model.architecture from scratch: every family's model, initialised by us and saved, computes our logits in
// transformers.
// QLoRA: each model loaded with its projections in NF4, with an adapter of nonzero B on every projection; PEFT's
// adapter on transformers' model whose projections hold bitsandbytes' NF4 round trip of the weights
// (hf_ref.py quantize_projections) must compute the same logits. The families whose projections differ in layout:
// plain (llama), q/k/v biases (qwen2), fused q/k/v and gate/up (phi3), in_features not a multiple of the block and
// (1 + w) norms (gemma3). One Python process for all of them.
TEST(QloraParity, Nf4BaseWithAdapterMatchesPeftOnBitsandbytesWeights) {
  TempDir out("ft-model-nf4");
  nlohmann::json jobs = nlohmann::json::array();
  std::map<std::string, at::Tensor> ours;
  for (const std::string family : {"llama", "qwen2", "phi3", "gemma3"}) {
    const auto model_dir = reference_dir() / family / "model";
    auto model = model::load_pretrained(model_dir, at::kCPU, at::kFloat, BaseQuantization::kNf4);
    for (const auto& [path, lin] : model->projections()) ASSERT_TRUE(lin->quantized()) << family << " " << path;
    const LoraConfig lora = add_adapters_with_nonzero_b(*model);
    const at::Tensor ids = io::read_safetensors(reference_dir() / family / "ref.safetensors").at("input_ids");
    {
      at::NoGradGuard no_grad;
      ours[family] = model->forward(ids);
    }
    model::save_adapter(*model, lora, out / family / "adapter", model_dir.string());
    io::write_safetensors(out / family / "ids.safetensors", {{"input_ids", ids}});
    jobs.push_back({{"model", model_dir.string()},
                    {"adapter", (out / family / "adapter").string()},
                    {"nf4", true},
                    {"ids", (out / family / "ids.safetensors").string()},
                    {"out", (out / family / "qlora.safetensors").string()}});
  }
  const auto res = run(ref_python() + " " + shell_quote(ref_script()) + " logits --jobs " + shell_quote(jobs.dump()));
  ASSERT_EQ(res.exit_code, 0) << res.output;
  for (const auto& [family, logits] : ours) {
    EXPECT_LT(max_diff(io::read_safetensors(out / family / "qlora.safetensors").at("logits"), logits), kTol) << family;
  }
}

TEST(FromScratch, EveryArchitectureSavesWhatTransformersLoads) {
  TempDir out("ft-scratch");
  const at::Tensor ids = at::randint(0, 50, {2, 12}, at::kLong);
  io::write_safetensors(out / "ids.safetensors", {{"input_ids", ids}});
  nlohmann::json jobs = nlohmann::json::array();
  std::map<std::string, at::Tensor> ours;
  for (const auto& family : EnumTable<ModelFamily>::entries) {
    const std::string arch = family.name;
    ModelConfig cfg = tiny_model_config(arch);
    cfg.tie_embeddings = arch == "gemma2";
    auto model = std::make_shared<model::Transformer>(model::args_from_config(cfg, 0));
    model::init_weights(*model, 0.2, 5);
    {
      at::NoGradGuard no_grad;
      for (auto& item : model->named_parameters()) {
        if (item.key().find("norm") != std::string::npos) item.value().normal_(model->args().gemma ? 0.0 : 1.0, 0.2);
      }
      ours[arch] = model->forward(ids);
    }
    model::save_pretrained(*model, out / arch, 0);
    jobs.push_back({{"model", (out / arch).string()}, {"ids", (out / "ids.safetensors").string()},
                    {"out", (out / (arch + ".safetensors")).string()}});
  }
  const auto res = run(ref_python() + " " + shell_quote(ref_script()) + " logits --jobs " + shell_quote(jobs.dump()));
  ASSERT_EQ(res.exit_code, 0) << res.output;
  for (const auto& [arch, logits] : ours) {
    EXPECT_LT(max_diff(io::read_safetensors(out / (arch + ".safetensors")).at("logits"), logits), kTol) << arch;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Parity,
                         ::testing::Values("llama", "llama_yarn", "mistral", "qwen2", "qwen3", "qwen3_yarn",
                                           "qwen3_bias", "phi3", "phi3_longrope", "gemma2", "gemma2_plain", "gemma3",
                                           "gemma3_full", "gemma3_bias", "gemma3_mm", "qwen3_moe", "qwen3_moe_step",
                                           "mixtral"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace ft::test
