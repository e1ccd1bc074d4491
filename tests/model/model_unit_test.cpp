// Model behaviour that needs no Python reference: config and checkpoint errors, LoRA algebra, activation
// checkpointing, the KV cache, the kernel policy and attention plan, init and dtype handling.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/attention.h"
#include "model/generate.h"
#include "model/kernel_policy.h"
#include "model/pretrained.h"
#include "model/lora.h"
#include "model/tiny_config.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ft::test {
namespace {

model::ModelArgs tiny_args(const std::string& type = "llama") {
  return model::args_from_config(tiny_model_config(type), 0);
}

std::shared_ptr<model::Transformer> tiny_model(const std::string& type = "llama", uint64_t seed = 1) {
  auto args = tiny_args(type);
  args.tie_word_embeddings = type == "qwen2";
  auto m = std::make_shared<model::Transformer>(args);
  model::init_weights(*m, 0.2, seed);
  return m;
}

// max |a - b| relative to the largest |b| (at least 1): float32 results whose rounding order may differ.
double scaled_max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1.0, b.abs().max().item<double>());
}

at::Tensor sample_ids() { return at::tensor({3, 7, 11, 5, 9, 2, 40, 33, 1, 17}, at::kLong).view({2, 5}); }

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// model.architecture's table and the families the model code implements are one list: each value has its family,
// found by its config.json model_type.
TEST(ModelConfig, EveryArchitectureSettingHasItsFamilyInOrder) {
  const auto& table = EnumTable<ModelFamily>::entries;
  ASSERT_EQ(model::families().size(), table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    const model::Family& f = model::families()[i];
    EXPECT_EQ(f.id, table[i].value);
    EXPECT_STREQ(f.model_type, table[i].name);
    EXPECT_EQ(model::find_family(table[i].name), &f);
    EXPECT_EQ(model::args_from_config(tiny_model_config(table[i].name), 0).model_type, table[i].name);
  }
  EXPECT_EQ(model::find_family("gpt2"), nullptr);
}

TEST(ModelConfig, MissingFieldNamesFileAndField) {
  TempDir dir;
  write_file(dir / "config.json", R"({"model_type": "llama", "vocab_size": 10, "intermediate_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 2})");
  const auto msg = error_of([&] { model::load_hf_config(dir.path()); });
  EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"hidden_size\""), std::string::npos) << msg;
}

TEST(ModelConfig, UnsupportedTypeArchitectureAndRopeAreNamed) {
  const std::string base = R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 2)";
  EXPECT_NE(error_of([&] { model::parse_hf_config(R"({"model_type": "gpt2", )" + base + "}", "c.json"); })
                .find("model_type \"gpt2\""),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              model::parse_hf_config(R"({"model_type": "llama", "architectures": ["LlamaForSequenceClassification"], )" +
                                         base + "}",
                                     "c.json");
            }).find("LlamaForSequenceClassification"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              model::parse_hf_config(
                  R"({"model_type": "llama", "rope_scaling": {"rope_type": "dynamic", "factor": 2}, )" + base + "}",
                  "c.json");
            }).find("rope_scaling.rope_type \"dynamic\""),
            std::string::npos);
}

// Found when writing tests/fuzz/fuzz_model_config: zero heads divided by zero (SIGFPE) before the heads were checked, and a
// field of the wrong JSON type escaped as nlohmann::type_error.
TEST(ModelConfig, ZeroHeadsAndWrongFieldTypesAreConfigErrors) {
  const std::string sizes = R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1)";
  EXPECT_NE(error_of([&] {
              model::parse_hf_config(R"({"model_type": "llama", "num_attention_heads": 0, )" + sizes + "}", "c.json");
            }).find("num_attention_heads must be a positive multiple"),
            std::string::npos);
  for (const std::string& bad : {R"({"model_type": 5, "num_attention_heads": 2, )" + sizes + "}",
                                 R"({"model_type": "llama", "architectures": [5], "num_attention_heads": 2, )" +
                                     sizes + "}"}) {
    const auto msg = error_of([&] { model::parse_hf_config(bad, "c.json"); });
    EXPECT_NE(msg.find("c.json"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("<no error>"), std::string::npos) << bad;
  }
}

// Found by tests/fuzz/fuzz_model_config: llama3 rope scaling's original context as a huge float was converted to an
// integer unchecked (undefined behaviour); now a ConfigError naming the field.
TEST(ModelConfig, Llama3OriginalContextMustBeAPositiveInteger) {
  const std::string base = R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 2, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": )";
  for (const std::string value : {"1.5e100", "0", "\"8192\""}) {
    const auto msg = error_of([&] { model::parse_hf_config(base + value + "}}", "c.json"); });
    EXPECT_NE(msg.find("original_max_position_embeddings\" must be a positive integer"), std::string::npos) << msg;
  }
  // The same trap in a list of EOS ids.
  const auto msg = error_of([&] {
    model::parse_hf_config(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
        "num_hidden_layers": 1, "num_attention_heads": 2, "eos_token_id": [2, 1e100]})",
                           "c.json");
  });
  EXPECT_NE(msg.find("\"eos_token_id\" must hold integers"), std::string::npos) << msg;
}

TEST(ModelConfig, SavedConfigParsesBackToTheSameArgs) {
  TempDir dir;
  auto a = tiny_args("mistral");
  a.sliding_window = 64;
  a.rope_scaling.type = "llama3";
  a.rope_scaling.factor = 8;
  a.eos_token_id = 2;
  a.eos_token_ids = {2};
  model::save_hf_config(a, dir / "config.json");
  const auto b = model::load_hf_config(dir.path());
  EXPECT_EQ(b.model_type, "mistral");
  EXPECT_EQ(b.num_kv_heads, 2);
  EXPECT_EQ(b.head_dim, 8);
  EXPECT_EQ(b.sliding_window.value_or(0), 64);
  EXPECT_EQ(b.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(b.rope_scaling.factor, 8.0);
  EXPECT_EQ(b.eos_token_id.value_or(-1), 2);
}

// YaRN's fields survive the saved config.json, and read as transformers reads them: the top-level original context
// wins over the rope object's, a zero beta is the default, a null factor is max / original.
TEST(ModelConfig, YarnFieldsSaveAndParseBack) {
  TempDir dir;
  auto a = tiny_args("qwen3");
  auto& s = a.rope_scaling;
  s.type = "yarn";
  s.factor = 4.0;
  s.original_max_position_embeddings = 32;
  s.beta_fast = 16.0;
  s.beta_slow = 2.0;
  s.truncate = false;
  s.mscale = 0.8;
  s.mscale_all_dim = 0.5;
  model::save_hf_config(a, dir / "config.json");
  const auto b = model::load_hf_config(dir.path()).rope_scaling;
  EXPECT_EQ(b.type, "yarn");
  EXPECT_DOUBLE_EQ(b.factor, 4.0);
  EXPECT_EQ(b.original_max_position_embeddings, 32);
  EXPECT_DOUBLE_EQ(b.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(b.beta_slow, 2.0);
  EXPECT_FALSE(b.truncate);
  EXPECT_DOUBLE_EQ(b.mscale.value_or(0), 0.8);
  EXPECT_DOUBLE_EQ(b.mscale_all_dim.value_or(0), 0.5);
  EXPECT_FALSE(b.attention_factor.has_value());

  const std::string sizes = R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 2, "max_position_embeddings": 256, )";
  const auto c = model::parse_hf_config(R"({"model_type": "llama", )" + sizes +
                                            R"("original_max_position_embeddings": 64, "rope_scaling": {"rope_type":
      "yarn", "factor": null, "original_max_position_embeddings": 16, "beta_fast": 0}})",
                                        "c.json")
                     .rope_scaling;
  EXPECT_EQ(c.original_max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(c.factor, 4.0);
  EXPECT_DOUBLE_EQ(c.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.beta_slow, 1.0);
  // A rope_scaling block added to a config that transformers 5 saved (rope_parameters: default) is what
  // transformers reads, in 4.x's spelling ("type") too; a null truncate means no truncation there.
  const auto d = model::parse_hf_config(R"({"model_type": "qwen3", "rope_theta": 1000000.0, )" + sizes +
                                            R"("rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
      "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "truncate": null}})",
                                        "c.json");
  EXPECT_EQ(d.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(d.rope_theta, 1000000.0);
  EXPECT_EQ(d.rope_scaling.original_max_position_embeddings, 32);
  EXPECT_FALSE(d.rope_scaling.truncate);
  EXPECT_EQ(
      model::parse_hf_config(R"({"model_type": "llama", )" + sizes +
                                 R"("rope_parameters": {"rope_type": "linear", "factor": 2.0}, "rope_scaling": {}})",
                             "c.json")
          .rope_scaling.type,
      "linear");
  EXPECT_NE(error_of([&] {
              model::parse_hf_config(
                  R"({"model_type": "llama", )" + sizes + R"("rope_scaling": {"rope_type": "yarn", "factor": -2}})",
                  "c.json");
            }).find("\"rope_scaling.factor\" must be a positive number"),
            std::string::npos);
}

// Gemma 3 as transformers 4.x wrote it (rope_theta, rope_local_base_freq, rope_scaling, sliding_window_pattern) and
// as 5.x writes it (per-layer-type rope_parameters, layer_types) read to the same args; Gemma2Config's defaults
// (head_dim 256, soft-capping 50/30, alternating layers, tied embeddings) apply to keys a config.json leaves out.
TEST(ModelConfig, GemmaConfigsReadInBothTransformersLayouts) {
  const std::string sizes = R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 4,
      "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4)";
  const auto v4 = model::parse_hf_config(R"({"model_type": "gemma3_text", "rope_theta": 1000000.0,
      "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
      "sliding_window": 512, "sliding_window_pattern": 2, )" + sizes + "}", "c.json");
  const auto v5 = model::parse_hf_config(R"({"model_type": "gemma3_text", "sliding_window": 512,
      "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
      "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}, )" + sizes + "}",
                                         "c.json");
  for (const auto& a : {v4, v5}) {
    EXPECT_TRUE(a.gemma);
    EXPECT_TRUE(a.qk_norm);
    EXPECT_EQ(a.rope_scaling.type, "linear");
    EXPECT_DOUBLE_EQ(a.rope_scaling.factor, 8.0);
    EXPECT_DOUBLE_EQ(a.rope_theta, 1e6);
    EXPECT_DOUBLE_EQ(a.local_rope_theta.value_or(0.0), 1e4);
    EXPECT_EQ(a.sliding_layers, (std::vector<bool>{true, false, true, false}));
    EXPECT_TRUE(a.layer_slides(0));
    EXPECT_FALSE(a.layer_slides(1));
    EXPECT_FALSE(a.attn_logit_softcapping.has_value());
    EXPECT_TRUE(a.tie_word_embeddings);
    EXPECT_EQ(a.hidden_act, "gelu_pytorch_tanh");
  }
  const auto g2 = model::parse_hf_config(R"({"model_type": "gemma2", "vocab_size": 10, "hidden_size": 8,
      "intermediate_size": 8, "num_hidden_layers": 3, "num_attention_heads": 2})", "c.json");
  EXPECT_EQ(g2.head_dim, 256);
  EXPECT_DOUBLE_EQ(g2.attn_logit_softcapping.value_or(0.0), 50.0);
  EXPECT_DOUBLE_EQ(g2.final_logit_softcapping.value_or(0.0), 30.0);
  EXPECT_DOUBLE_EQ(g2.query_pre_attn_scalar.value_or(0.0), 256.0);
  EXPECT_EQ(g2.sliding_window.value_or(0), 4096);
  EXPECT_EQ(g2.sliding_layers, (std::vector<bool>{true, false, true}));

  // Saved and read back (what transformers reads too: tests/model/parity_test.cpp).
  TempDir dir;
  model::save_hf_config(v4, dir / "config.json");
  const auto back = model::load_hf_config(dir.path());
  EXPECT_EQ(back.sliding_layers, v4.sliding_layers);
  EXPECT_DOUBLE_EQ(back.local_rope_theta.value_or(0.0), 1e4);
  EXPECT_EQ(back.rope_scaling.type, "linear");
  const auto saved = nlohmann::json::parse(read_file(dir / "config.json"));
  EXPECT_EQ(saved.at("query_pre_attn_scalar"), 256);  // an int, as Gemma3TextConfig declares it
  EXPECT_EQ(saved.at("rope_parameters").at("sliding_attention").at("rope_theta"), 10000.0);
}

// Gemma 3 4B's config.json as released (google/gemma-3-4b-it): Gemma3ForConditionalGeneration whose text_config
// gives only what differs from Gemma3TextConfig's defaults; the language model reads as that 4B model is (8 heads of
// 256, 4 kv heads, vocabulary 262,208, 5 of 6 layers sliding over 1,024 tokens, linear rope x8 on the global
// layers), the special tokens and dtype from the outer file. Saved, the file stays multimodal.
TEST(ModelConfig, Gemma3MultimodalConfigReadsItsSparseTextConfigOverGemma3Defaults) {
  const std::string released = R"({"architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
      "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144, "mm_tokens_per_image": 256,
      "model_type": "gemma3", "torch_dtype": "bfloat16",
      "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                      "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                      "sliding_window": 1024},
      "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                        "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                        "patch_size": 14, "vision_use_head": false}})";
  const auto a = model::parse_hf_config(released, "config.json");
  EXPECT_EQ(a.multimodal_type, "gemma3");
  EXPECT_EQ(a.model_type, "gemma3_text");
  EXPECT_EQ(a.vocab_size, 262208);
  EXPECT_EQ(a.hidden_size, 2560);
  EXPECT_EQ(a.num_layers, 34);
  EXPECT_EQ(a.num_heads, 8);
  EXPECT_EQ(a.num_kv_heads, 4);
  EXPECT_EQ(a.head_dim, 256);
  EXPECT_DOUBLE_EQ(a.query_pre_attn_scalar.value_or(0.0), 256.0);
  EXPECT_EQ(a.sliding_window.value_or(0), 1024);
  EXPECT_TRUE(a.layer_slides(0) && a.layer_slides(4) && !a.layer_slides(5) && a.layer_slides(6));
  EXPECT_EQ(a.rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(a.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(a.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(a.local_rope_theta.value_or(0.0), 1e4);
  EXPECT_DOUBLE_EQ(a.rms_norm_eps, 1e-6);
  EXPECT_TRUE(a.tie_word_embeddings);
  EXPECT_EQ(a.eos_token_ids, (std::vector<int64_t>{1, 106}));
  EXPECT_EQ(a.bos_token_id.value_or(-1), 2);
  EXPECT_EQ(a.torch_dtype, "bfloat16");

  TempDir dir;
  model::save_hf_config(a, dir / "config.json");
  const auto saved = nlohmann::json::parse(read_file(dir / "config.json"));
  EXPECT_EQ(saved.at("model_type"), "gemma3");
  EXPECT_EQ(saved.at("architectures"), nlohmann::json::array({"Gemma3ForConditionalGeneration"}));
  EXPECT_EQ(saved.at("vision_config").at("num_hidden_layers"), 27);
  EXPECT_EQ(saved.at("text_config").at("num_attention_heads"), 8);
  EXPECT_FALSE(saved.at("text_config").contains("architectures"));
  const auto back = model::load_hf_config(dir.path());
  EXPECT_EQ(back.multimodal_type, "gemma3");
  EXPECT_EQ(back.num_layers, 34);
  EXPECT_EQ(back.sliding_layers, a.sliding_layers);

  // The language model alone (model.random_weights: no vision tower drawn) saves as Gemma3ForCausalLM's config.
  model::save_hf_config(model::language_model_only(a), dir / "config.json");
  const auto alone = nlohmann::json::parse(read_file(dir / "config.json"));
  EXPECT_EQ(alone.at("model_type"), "gemma3_text");
  EXPECT_EQ(alone.at("architectures"), nlohmann::json::array({"Gemma3ForCausalLM"}));
  EXPECT_FALSE(alone.contains("vision_config") || alone.contains("text_config"));
  EXPECT_EQ(alone.at("num_hidden_layers"), 34);
  EXPECT_TRUE(model::load_hf_config(dir.path()).multimodal_type.empty());

  EXPECT_THROW(model::parse_hf_config(R"({"model_type": "gemma3"})", "c.json"), ConfigError);  // no text_config
}

TEST(ModelConfig, GemmaFieldsTheModelCannotHonourAreRefusedByName) {
  const std::string sizes = R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 2,
      "num_attention_heads": 2, "head_dim": 4)";
  const auto refused = [&](const std::string& fields) {
    const std::string text = R"({"model_type": "gemma2", )" + fields + ", " + sizes + "}";
    return error_of([&] { model::parse_hf_config(text, "c.json"); });
  };
  EXPECT_NE(refused(R"("hidden_activation": "relu")").find("hidden_activation \"relu\""), std::string::npos);
  EXPECT_NE(refused(R"("layer_types": ["full_attention"])").find("one entry per layer (2)"), std::string::npos);
  EXPECT_NE(refused(R"("layer_types": ["full_attention", "chunked_attention"])").find("chunked_attention"),
            std::string::npos);
  EXPECT_NE(refused(R"("use_bidirectional_attention": true)").find("use_bidirectional_attention"), std::string::npos);
  // A layer count no model has would size the per-layer list of layer types.
  EXPECT_NE(error_of([&] {
              model::parse_hf_config(R"({"model_type": "gemma2", "vocab_size": 10, "hidden_size": 8,
                  "intermediate_size": 8, "num_hidden_layers": 1000000000000, "num_attention_heads": 2})",
                                     "c.json");
            }).find("num_hidden_layers 1000000000000 is outside [1, 10000]"),
            std::string::npos);
  EXPECT_NE(refused(R"("attn_logit_softcapping": -1.0)").find("attn_logit_softcapping must be positive"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              model::parse_hf_config(R"({"model_type": "gemma3_text", "rope_parameters": {"sliding_attention":
                  {"rope_type": "linear", "factor": 2.0}}, )" + sizes + "}", "c.json");
            }).find("rope_parameters.sliding_attention.rope_type \"linear\""),
            std::string::npos);
}

TEST(ModelCheckpoint, MissingUnexpectedAndMisshapedTensorsAreNamed) {
  TempDir dir;
  auto m = tiny_model();
  model::save_pretrained(*m, dir / "m", 0);
  const auto file = dir / "m" / "model.safetensors";
  auto tensors = io::read_safetensors(file);
  for (auto& [k, v] : tensors) v = v.clone();  // detach from the mapping before rewriting the file

  auto broken = tensors;
  broken.erase("model.layers.1.mlp.up_proj.weight");
  io::write_safetensors(file, broken);
  auto msg = error_of([&] { model::load_pretrained(dir / "m", at::kCPU, at::kFloat); });
  EXPECT_NE(msg.find("missing tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos) << msg;
  // A model directory that does not fit its config.json is bad input (exit code 2), not an internal failure.
  EXPECT_THROW(model::load_pretrained(dir / "m", at::kCPU, at::kFloat), ConfigError);

  broken = tensors;
  broken["model.layers.7.mlp.up_proj.weight"] = at::zeros({2});
  io::write_safetensors(file, broken);
  msg = error_of([&] { model::load_pretrained(dir / "m", at::kCPU, at::kFloat); });
  EXPECT_NE(msg.find("unexpected tensor 'model.layers.7.mlp.up_proj.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;

  broken = tensors;
  broken["model.norm.weight"] = at::ones({31});
  io::write_safetensors(file, broken);
  msg = error_of([&] { model::load_pretrained(dir / "m", at::kCPU, at::kFloat); });
  EXPECT_NE(msg.find("'model.norm.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[31]"), std::string::npos) << msg;

  broken = tensors;
  broken["model.norm.weight"] = at::ones({32}, at::kInt);
  io::write_safetensors(file, broken);
  msg = error_of([&] { model::load_pretrained(dir / "m", at::kCPU, at::kFloat); });
  EXPECT_NE(msg.find("floating-point"), std::string::npos) << msg;
}

TEST(ModelCheckpoint, Bf16SaveWritesBf16AndCastsOnLoad) {
  TempDir dir;
  auto m = tiny_model("qwen2");
  m->to(at::kBFloat16);
  model::save_pretrained(*m, dir / "m", 0);
  EXPECT_EQ(nlohmann::json::parse(read_file(dir / "m" / "config.json"))["torch_dtype"], "bfloat16");
  const auto stored = io::read_safetensors(dir / "m" / "model.safetensors");
  EXPECT_EQ(stored.at("model.embed_tokens.weight").scalar_type(), at::kBFloat16);
  EXPECT_EQ(stored.count("lm_head.weight"), 0u);  // tied, as transformers writes it
  auto f32 = model::load_pretrained(dir / "m", at::kCPU, at::kFloat);
  EXPECT_EQ(f32->lm_head_weight().scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(f32->lm_head_weight(), stored.at("model.embed_tokens.weight").to(at::kFloat)));
}

// An F32 checkpoint read into bf16, and F32 draws rounded to bf16, each with what the cast dropped per parameter
// (model::RoundingResiduals, optimizer.kahan_summation's starting compensation); a bf16 checkpoint drops nothing.
TEST(ModelCheckpoint, CastsToBf16KeepWhatTheyDroppedWhenAsked) {
  TempDir dir;
  auto m = tiny_model("llama");
  model::save_pretrained(*m, dir / "f32", 0);
  const auto stored = io::read_safetensors(dir / "f32" / "model.safetensors");
  model::RoundingResiduals residuals;
  auto bf16 = model::load_pretrained(dir / "f32", at::kCPU, at::kBFloat16, BaseQuantization::kNone, &residuals);
  const auto params = model::base_parameters(*bf16);
  EXPECT_EQ(residuals.size(), params.size());
  for (const auto& [name, p] : params) {
    ASSERT_EQ(residuals.count(name), 1u) << name;
    const at::Tensor& r = residuals.at(name);
    EXPECT_EQ(r.scalar_type(), at::kBFloat16) << name;
    // The cast plus its residual is the stored value to the residual's own rounding (2^-9 of it).
    const at::Tensor restored = p.to(at::kFloat) + r.to(at::kFloat);
    const double r_max = r.to(at::kFloat).abs().max().item<double>();
    EXPECT_LE((restored - stored.at(name)).abs().max().item<double>(), std::ldexp(r_max, -8)) << name;
    if (name.find("norm") == std::string::npos) {
      EXPECT_GT(r_max, 0.0) << name;  // drawn F32 values lie between bf16's
    }
  }
  bf16->to(at::kBFloat16);
  model::save_pretrained(*bf16, dir / "bf16", 0);
  model::RoundingResiduals none;
  model::load_pretrained(dir / "bf16", at::kCPU, at::kBFloat16, BaseQuantization::kNone, &none);
  EXPECT_TRUE(none.empty());

  auto drawn = std::make_shared<model::Transformer>(tiny_args());
  model::RoundingResiduals drawn_residuals;
  model::init_weights(*drawn, 0.2, 1, at::Device(at::kCPU), at::kBFloat16, BaseQuantization::kNone, &drawn_residuals);
  const at::Tensor embed = drawn->backbone().embed_tokens->weight;
  const at::Tensor draw = m->backbone().embed_tokens->weight;  // the same seed's F32 draws
  EXPECT_TRUE(at::equal(embed, draw.to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(drawn_residuals.at("model.embed_tokens.weight"),
                        (draw - draw.to(at::kBFloat16).to(at::kFloat)).to(at::kBFloat16)));
}

TEST(ModelInit, SameSeedSameWeightsAndStdAsRequested) {
  auto a = tiny_model("llama", 5), b = tiny_model("llama", 5), c = tiny_model("llama", 6);
  const auto pa = model::base_parameters(*a), pb = model::base_parameters(*b), pc = model::base_parameters(*c);
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(at::equal(pa[i].second, pb[i].second)) << pa[i].first;
  EXPECT_FALSE(at::equal(pa[0].second, pc[0].second));
  const auto embed = a->backbone().embed_tokens->weight;
  EXPECT_NEAR(embed.std().item<double>(), 0.2, 0.02);
  EXPECT_TRUE(at::equal(a->backbone().norm->weight, at::ones({32})));
}

TEST(ModelLora, FreezesBaseAndStartsAsTheIdentity) {
  auto m = tiny_model();
  at::Tensor base;
  {
    at::NoGradGuard g;
    base = m->forward(sample_ids());
  }
  LoraConfig cfg;
  cfg.targets = {"q_proj", "v_proj", "down_proj"};
  model::apply_lora(*m, cfg, 1);
  const auto trainable = model::trainable_parameters(*m);
  EXPECT_EQ(trainable.size(), 2u * 3 * 2);  // A and B, three targets, two layers
  for (const auto& t : trainable) EXPECT_EQ(t.scalar_type(), at::kFloat);
  at::NoGradGuard g;
  EXPECT_TRUE(at::allclose(m->forward(sample_ids()), base));  // B = 0
}

TEST(ModelLora, MergedWeightsComputeTheAdapterOutput) {
  auto m = tiny_model();
  LoraConfig cfg;
  cfg.rank = 2;
  cfg.alpha = 6;
  cfg.targets = model::lora_target_names(m->args());
  model::apply_lora(*m, cfg, 1);
  at::NoGradGuard g;
  for (auto& [name, t] : model::adapter_tensors(*m)) t.normal_(0, 0.3);
  // Closed form for one projection: W' = W + (alpha / r) B A.
  auto q = m->layer(0)->self_attn->q_proj;
  const at::Tensor expected = q->weight + 3.0 * at::matmul(q->lora_b, q->lora_a);
  const at::Tensor with_adapter = m->forward(sample_ids());
  model::merge_lora(*m);
  EXPECT_TRUE(at::allclose(q->weight, expected, 1e-6, 1e-6));
  // Merging changes the rounding order (x(W + sBA)^T vs xW^T + s(xA^T)B^T), and SIMD widths differ by CPU.
  EXPECT_LT(scaled_max_diff(m->forward(sample_ids()), with_adapter), 2e-5);
  EXPECT_TRUE(model::adapter_tensors(*m).empty());
}

// Phi-3 keeps q/k/v and gate/up fused as its checkpoints store them: another family's LoRA target is refused with
// phi3's own list, and a misshapen fused weight is named with both shapes (exit 2).
TEST(ModelPhi3, FusedProjectionsNameTheirTargetsAndShapes) {
  TempDir dir;
  auto a = tiny_args();
  a.model_type = "phi3";
  a.fused_projections = true;
  auto m = std::make_shared<model::Transformer>(a);
  model::init_weights(*m, 0.2, 1);
  LoraConfig cfg;
  cfg.targets = {"q_proj"};
  const auto msg = error_of([&] { model::apply_lora(*m, cfg, 1); });
  EXPECT_NE(msg.find("phi3 has no projection 'q_proj'"), std::string::npos) << msg;
  EXPECT_EQ(model::lora_target_names(a), (std::vector<std::string>{"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}));
  model::save_pretrained(*m, dir / "m", 0);
  auto tensors = io::read_safetensors(dir / "m" / "model.safetensors");
  for (auto& [k, v] : tensors) v = v.clone();  // detach from the mapping before rewriting the file
  EXPECT_EQ(tensors.at("model.layers.0.self_attn.qkv_proj.weight").sizes().vec(),
            (std::vector<int64_t>{64, 32}));  // (4 + 2 * 2) heads of 8
  EXPECT_EQ(tensors.at("model.layers.0.mlp.gate_up_proj.weight").sizes().vec(), (std::vector<int64_t>{96, 32}));
  EXPECT_EQ(tensors.count("model.layers.0.self_attn.q_proj.weight"), 0u);
  tensors["model.layers.0.self_attn.qkv_proj.weight"] = at::zeros({48, 32});
  io::write_safetensors(dir / "m" / "model.safetensors", tensors);
  const auto shape_msg = error_of([&] { model::load_pretrained(dir / "m", at::kCPU, at::kFloat); });
  EXPECT_NE(shape_msg.find("'model.layers.0.self_attn.qkv_proj.weight'"), std::string::npos) << shape_msg;
  EXPECT_NE(shape_msg.find("has shape [48, 32], the model expects [64, 32]"), std::string::npos) << shape_msg;
}

TEST(ModelLora, UnknownTargetIsAConfigError) {
  auto m = tiny_model();
  LoraConfig cfg;
  cfg.targets = {"qkv_proj"};
  EXPECT_NE(error_of([&] { model::apply_lora(*m, cfg, 1); }).find("qkv_proj"), std::string::npos);
}

// PEFT's target_modules rules: all-linear adapts every projection (saved as the resolved names, as PEFT saves it), a
// dotted path adapts the modules whose path ends with it, and a regex string in adapter_config.json full-matches
// module paths; a target that adapts nothing, or a regex reaching the LM head, is refused by name.
TEST(ModelLora, AllLinearDottedPathsAndRegexTargetModulesFollowPeft) {
  auto adapted = [](const model::Transformer& m) {
    std::vector<std::string> names;
    for (const auto& [name, t] : model::adapter_tensors(m)) {
      const std::string prefix = "base_model.model.";
      if (name.find("lora_A") != std::string::npos) names.push_back(name.substr(prefix.size()));
    }
    return names;
  };
  auto m = tiny_model();
  LoraConfig cfg;
  cfg.targets = {"all-linear"};
  model::apply_lora(*m, cfg, 1);
  EXPECT_EQ(adapted(*m).size(), 7u * 2);  // every projection of both layers

  auto one = tiny_model();
  cfg.targets = {"model.layers.1.self_attn.q_proj", "mlp.down_proj"};
  model::apply_lora(*one, cfg, 1);
  EXPECT_EQ(adapted(*one), (std::vector<std::string>{"model.layers.0.mlp.down_proj.lora_A.weight",
                                                     "model.layers.1.self_attn.q_proj.lora_A.weight",
                                                     "model.layers.1.mlp.down_proj.lora_A.weight"}));
  for (const std::string bad : {"lm_head", "layers.7.self_attn.q_proj", "proj"}) {
    cfg.targets = {bad};
    auto fresh = tiny_model();
    EXPECT_NE(error_of([&] { model::apply_lora(*fresh, cfg, 1); }).find("no projection '" + bad + "'"),
              std::string::npos)
        << bad;
  }

  TempDir dir;
  cfg.targets = {"all-linear"};
  model::save_adapter(*m, cfg, dir / "all", "base");
  const auto saved = nlohmann::json::parse(read_file(dir / "all" / "adapter_config.json"));
  EXPECT_EQ(saved.at("target_modules").size(), 7u);
  // The same adapter, its target_modules rewritten as a regex over the module paths: loads onto every projection.
  auto rewritten = saved;
  rewritten["target_modules"] = R"(.*\.(self_attn|mlp)\.\w+_proj)";
  write_file(dir / "all" / "adapter_config.json", rewritten.dump());
  auto loaded = tiny_model();
  model::load_adapter(*loaded, dir / "all");
  EXPECT_EQ(adapted(*loaded), adapted(*m));
  // ".*" reaches lm_head; layer 9 does not exist; "(" does not compile; nested quantifiers over a path must not
  // backtrack for ages (matched in polynomial time, here matching nothing); a back-reference or a 300-character
  // pattern is refused.
  for (const std::string& regex :
       {std::string(".*"), std::string("model\\.layers\\.9\\..*"), std::string("("), std::string("(.*.*)*z"),
        std::string("(q)\\1"), std::string(300, 'a')}) {
    rewritten["target_modules"] = regex;
    write_file(dir / "all" / "adapter_config.json", rewritten.dump());
    auto again = tiny_model();
    const auto msg = error_of([&] { model::load_adapter(*again, dir / "all"); });
    EXPECT_NE(msg.find("target_modules regex"), std::string::npos) << regex << ": " << msg;
  }
}

// Loss gradients with per-layer recompute equal those of the plain backward, also with LoRA dropout (the recompute
// must replay the forward's RNG) and frozen embeddings (the layer input does not require grad).
void expect_same_grads(bool lora) {
  auto run_once = [&](bool ckpt) {
    auto m = tiny_model();
    if (lora) {
      LoraConfig cfg;
      cfg.dropout = 0.3;
      cfg.targets = {"q_proj", "o_proj", "up_proj"};
      model::apply_lora(*m, cfg, 2);
      at::NoGradGuard g;
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);  // the same B in both runs
      for (auto& [name, t] : model::adapter_tensors(*m)) t.normal_(0, 0.1, gen);
    }
    m->train();
    m->set_activation_checkpointing(ckpt);
    at::manual_seed(42);
    const at::Tensor logits = m->forward(sample_ids());
    logits.pow(2).mean().backward();
    std::vector<at::Tensor> grads;
    for (auto& p : model::trainable_parameters(*m)) grads.push_back(p.grad().clone());
    return grads;
  };
  const auto plain = run_once(false), ckpt = run_once(true);
  ASSERT_EQ(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(at::allclose(plain[i], ckpt[i], 1e-6, 1e-7)) << i;
    EXPECT_GT(plain[i].abs().sum().item<double>(), 0.0) << i;
  }
}

TEST(ModelCheckpointing, FullFineTuneGradientsAreIdentical) { expect_same_grads(false); }
TEST(ModelCheckpointing, LoraWithDropoutGradientsAreIdentical) { expect_same_grads(true); }

TEST(ModelKVCache, IncrementalDecodingEqualsFullForward) {
  for (const std::string type : {"llama", "mistral"}) {
    auto args = tiny_args(type);
    if (type == "mistral") args.sliding_window = 4;  // shorter than the sequence: the window mask decides
    model::Transformer m(args);
    model::init_weights(m, 0.2, 3);
    at::NoGradGuard g;
    const at::Tensor ids = sample_ids();
    const at::Tensor full = m.forward(ids);
    model::KVCache cache;
    const at::Tensor first = m.forward(ids.narrow(1, 0, 3), {}, {}, &cache);
    const at::Tensor second = m.forward(ids.narrow(1, 3, 1), {}, {}, &cache);
    const at::Tensor third = m.forward(ids.narrow(1, 4, 1), {}, {}, &cache);
    EXPECT_LT(scaled_max_diff(at::cat({first, second, third}, 1), full), 1e-5) << type;
  }
}

// The kernels of a run are decided once, from train.fused_kernels, the device and the build.
TEST(ModelKernels, PolicyResolvesFromTheSettingTheDeviceAndTheBuild) {
  const auto cpu = model::KernelPolicy::resolve(true, at::Device(at::kCPU), at::kFloat);
  EXPECT_FALSE(cpu.fused || cpu.kernels || cpu.group_gemms);
  EXPECT_NE(cpu.why_not.find("the run is on cpu"), std::string::npos) << cpu.why_not;
  const auto off = model::KernelPolicy::resolve(false, at::Device(at::kCUDA), at::kBFloat16);
  EXPECT_FALSE(off.fused || off.kernels || off.group_gemms);
  EXPECT_EQ(off.why_not, "train.fused_kernels is false");
  const auto on = model::KernelPolicy::resolve(true, at::Device(at::kCUDA), at::kBFloat16);
  EXPECT_TRUE(on.fused && on.group_gemms);
  EXPECT_EQ(on.kernels, model::KernelPolicy::built_with_kernels());
  EXPECT_EQ(on.why_not.empty(), on.kernels) << on.why_not;
  EXPECT_FALSE(on.kernels_for(at::zeros({1})));  // a CPU tensor never takes a CUDA kernel
}

// The log line "kernels: attention ..." names the path that AttentionPlan::build takes under the same rule.
TEST(ModelKernels, AttentionLogLineNamesThePathOfThePolicy) {
  using model::AttentionPlan;
  using model::KernelPolicy;
  const at::Device cuda(at::kCUDA), cpu(at::kCPU);
  const auto fused_bf16 = KernelPolicy::resolve(true, cuda, at::kBFloat16);
  auto a = tiny_args("llama");  // head_dim 8: within flash attention's limits
  EXPECT_EQ(AttentionPlan::describe(a, KernelPolicy::resolve(false, cuda, at::kBFloat16), false), "SDPA (causal)");
  EXPECT_EQ(AttentionPlan::describe(a, fused_bf16, true), "varlen flash attention over packed pieces");
  // Flash attention takes half precision only.
  EXPECT_EQ(AttentionPlan::describe(a, KernelPolicy::resolve(true, cuda, at::kFloat), true),
            "SDPA with a block-diagonal mask (packed rows)");
  a.sliding_window = 16;
  EXPECT_EQ(AttentionPlan::describe(a, fused_bf16, false),
            "SDPA (causal); sliding window of 16 through varlen flash attention");
  EXPECT_EQ(AttentionPlan::describe(a, KernelPolicy::resolve(true, cpu, at::kBFloat16), false),
            "SDPA (causal); sliding window of 16 as a dense mask");
  a.sliding_window.reset();
  a.attn_logit_softcapping = 50.0;
  const std::string capped = KernelPolicy::built_with_kernels() ? "soft-capped attention kernel" : "eager";
  EXPECT_EQ(AttentionPlan::describe(a, fused_bf16, true),
            capped + " (logit soft-capping, which SDPA and flash attention lack) with a block-diagonal mask "
                     "(packed rows)");
  EXPECT_EQ(AttentionPlan::describe(a, KernelPolicy::resolve(false, cuda, at::kBFloat16), false),
            "eager (logit soft-capping, which SDPA and flash attention lack)");
}

TEST(ModelKernels, AttentionPlanBuildsEachLayerKindsMaskOnce) {
  const auto policy = model::KernelPolicy::resolve(true, at::Device(at::kCPU), at::kFloat);
  auto a = tiny_args();
  model::AttentionBatch batch;
  batch.rows = 2;
  batch.length = 5;
  const model::AttentionMask causal = model::AttentionPlan::build(a, policy, batch).for_layer(a, 0);
  EXPECT_TRUE(causal.causal && !causal.mask.defined() && !causal.varlen());
  EXPECT_EQ(causal.kernel, model::AttentionKernel::kSdpa);
  // Packed rows: a block-diagonal causal mask per row.
  batch.segment_ids = at::tensor({0, 0, 1, 1, 1, 0, 0, 0, 0, 0}, at::kInt).view({2, 5});
  const model::AttentionMask packed = model::AttentionPlan::build(a, policy, batch).for_layer(a, 1);
  ASSERT_TRUE(packed.mask.defined());
  EXPECT_FALSE(packed.causal);
  EXPECT_EQ(packed.mask.sizes(), at::IntArrayRef({2, 1, 5, 5}));
  EXPECT_FALSE(packed.mask[0][0][2][1].item<bool>());  // another sample of the row
  EXPECT_TRUE(packed.mask[0][0][3][2].item<bool>());
  EXPECT_TRUE(packed.mask[1][0][4][0].item<bool>());
  EXPECT_FALSE(packed.mask[1][0][0][1].item<bool>());  // a later position
  // A window shorter than the keys: the sliding layers get a dense window mask, the others stay causal.
  a.sliding_window = 2;
  a.sliding_layers = {true, false};
  batch.segment_ids = at::Tensor();
  const model::AttentionPlan windowed = model::AttentionPlan::build(a, policy, batch);
  EXPECT_FALSE(windowed.for_layer(a, 1).mask.defined());
  const at::Tensor window = windowed.for_layer(a, 0).mask;  // [1, 1, 5, 5]
  ASSERT_TRUE(window.defined());
  EXPECT_EQ(window[0][0][4].sum().item<int64_t>(), 2);  // the query itself and the key before it
  // One token decoded after five cached: every cached key, no mask.
  model::AttentionBatch decode;
  decode.rows = 1;
  decode.length = 1;
  decode.past = 5;
  decode.cached = true;
  const auto plain = tiny_args();
  const model::AttentionMask step = model::AttentionPlan::build(plain, policy, decode).for_layer(plain, 0);
  EXPECT_FALSE(step.causal || step.mask.defined());
}

TEST(ModelAutocast, Bf16AutocastOnCpuStaysCloseToF32) {
  auto m = tiny_model();
  at::NoGradGuard g;
  const at::Tensor ref = m->forward(sample_ids());
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  const at::Tensor low = m->forward(sample_ids());
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  EXPECT_EQ(low.scalar_type(), at::kBFloat16);
  EXPECT_LT((low.to(at::kFloat) - ref).abs().max().item<double>(), 0.05 * ref.abs().max().item<double>());
}

TEST(ModelGenerate, SamplingIsSeededAndStopsAtStopId) {
  auto m = tiny_model();
  model::GenerateOptions o;
  o.max_new_tokens = 20;
  o.temperature = 1.0;
  o.top_k = 10;
  o.top_p = 0.9;
  o.seed = 9;
  const auto a = model::generate(*m, {1, 2, 3}, o);
  EXPECT_EQ(a, model::generate(*m, {1, 2, 3}, o));
  ASSERT_EQ(a.size(), 20u);
  o.stop_ids = {a[4]};
  const auto b = model::generate(*m, {1, 2, 3}, o);
  const auto first = std::find(a.begin(), a.end(), a[4]) - a.begin();
  EXPECT_EQ(b.size(), static_cast<size_t>(first + 1));
  EXPECT_EQ(b.back(), a[4]);
}

TEST(ModelGenerate, TopKOneIsGreedy) {
  const at::Tensor logits = at::tensor({0.1, 2.0, 1.9, -1.0});
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1);
  model::GenerateOptions o;
  o.temperature = 5.0;
  o.top_k = 1;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(model::sample_next(logits, o, gen), 1);
  o.top_k = 0;
  o.top_p = 0.01;  // the nucleus holds only the most likely token
  for (int i = 0; i < 20; ++i) EXPECT_EQ(model::sample_next(logits, o, gen), 1);
}

// A rank-2 adapter on `targets` of tiny_model(), saved into `out` as save_adapter writes it.
void save_tiny_adapter(const std::filesystem::path& out, const std::vector<std::string>& targets) {
  auto m = tiny_model();
  LoraConfig lora;
  lora.rank = 2;
  lora.targets = targets;
  model::apply_lora(*m, lora, 1);
  model::save_adapter(*m, lora, out, "");
}

// A downloaded model directory whose tokenizer file is a symlink out of it (tokenizer.json -> ~/.ssh/id_rsa) must not
// get that file copied into an export or a run's model directory.
// An adapter directory whose weights are a symlink out of it (adapter_model.safetensors -> elsewhere) is refused
// before anything is read, as bad input naming the file.
TEST(ModelUnit, AdapterWeightsThatLinkOutOfTheAdapterDirectoryAreRefused) {
  TempDir dir("ft-adapterlink");
  save_tiny_adapter(dir / "real", {"q_proj", "v_proj"});
  std::filesystem::create_directories(dir / "adapter");
  std::filesystem::copy_file(dir / "real" / "adapter_config.json", dir / "adapter" / "adapter_config.json");
  std::filesystem::create_symlink(dir / "real" / "adapter_model.safetensors",
                                  dir / "adapter" / "adapter_model.safetensors");
  try {
    model::load_adapter(*tiny_model(), dir / "adapter");
    ADD_FAILURE() << "a linked-out adapter was loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("adapter_model.safetensors resolves outside"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(model::load_adapter(*tiny_model(), dir / "real"));
}

// An adapter saved as a PyTorch pickle (adapter_model.bin) is not read: the error names it, the hint is the one-line
// conversion to safetensors.
TEST(ModelUnit, PickleAdapterIsRefusedWithItsConversion) {
  TempDir dir("ft-adapterpickle");
  save_tiny_adapter(dir / "adapter", {"q_proj"});
  std::filesystem::rename(dir / "adapter" / "adapter_model.safetensors", dir / "adapter" / "adapter_model.bin");
  try {
    model::load_adapter(*tiny_model(), dir / "adapter");
    ADD_FAILURE() << "a pickle adapter was loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("holds adapter_model.bin, a PyTorch pickle"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("save_file(torch.load('" + (dir / "adapter").string() + "/adapter_model.bin')"),
              std::string::npos)
        << e.hint();
  }
}

// Found by tests/fuzz/fuzz_model_config: a field of adapter_config.json of the wrong JSON type escaped as
// nlohmann::type_error; a huge rank or added-token id would have sized huge matrices.
TEST(ModelUnit, AdapterConfigOfTheWrongTypesOrHugeSizesIsRefused) {
  TempDir dir("ft-adaptercfg");
  save_tiny_adapter(dir / "a", {"q_proj"});
  const auto good = nlohmann::json::parse(read_file(dir / "a" / "adapter_config.json"));
  auto expect_refused = [&](const char* key, const nlohmann::json& value, const std::string& part) {
    auto j = good;
    j[key] = value;
    write_file(dir / "a" / "adapter_config.json", j.dump());
    const auto msg = error_of([&] { model::load_adapter(*tiny_model(), dir / "a"); });
    EXPECT_NE(msg.find(part), std::string::npos) << key << ": " << msg;
  };
  expect_refused("r", "2", "r must be an integer");
  expect_refused("r", 1e100, "r must be an integer");  // a float converted unchecked was undefined behaviour
  expect_refused("lora_alpha", nlohmann::json::array(), "a field has an unexpected type");
  expect_refused("target_modules", {"q_proj", 7}, "a field has an unexpected type");
  expect_refused("r", int64_t{1} << 40, "must be in [1, hidden_size 32]");
  expect_refused("trainable_token_indices", {int64_t{1} << 40}, "far beyond the 50 tokens of the base model");
}

}  // namespace
}  // namespace ft::test
