// `finetune generate` and `finetune export` end to end on a transformers-made model.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/pretrained.h"
#include "model/lora.h"
#include "model/reference.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

std::string q(const std::filesystem::path& p) { return shell_quote(p.string()); }

TEST(CliModel, HelpShowsExamples) {
  for (const char* sub : {"generate", "export"}) {
    const auto r = run_finetune(std::string(sub) + " --help");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("Example"), std::string::npos) << r.output;
  }
}

TEST(CliModel, GenerateJsonMatchesTransformersGreedy) {
  const auto dir = reference_dir() / "llama";
  const auto ref = nlohmann::json::parse(read_file(dir / "ref.json"));
  std::string ids;
  for (const auto& id : ref["prompt"]) ids += std::to_string(id.get<int64_t>()) + " ";
  const auto r = run_finetune("generate --model " + q(dir / "model") + " --prompt-ids " + shell_quote(ids) +
                              " --max-new-tokens 32 --device cpu --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto out = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  // config.json declares eos_token_id 2: generation stops right after it (transformers' reference ran without EOS).
  std::vector<int64_t> expected;
  for (const auto& id : ref["generated"]) {
    expected.push_back(id.get<int64_t>());
    if (expected.back() == 2) break;
  }
  EXPECT_EQ(out["generated_ids"].get<std::vector<int64_t>>(), expected);
  EXPECT_EQ(out["prompt_ids"], ref["prompt"]);
  EXPECT_EQ(out["text"], "");  // no tokenizer.model in this directory
}

// --quantize nf4 / fp8: greedy generation on the quantized base equals transformers' generate() on the same base
// (the projections' bitsandbytes NF4 round trip, or torchao's per-row float8 round trip of weights and inputs), and
// so does --quantize nf4 --nf4-compute fp8 (the float8 round trip of the NF4 round trip's weight).
TEST(CliModel, GenerateOnAQuantizedBaseMatchesTransformersOnThatBase) {
  const auto dir = reference_dir() / "llama";
  const std::vector<int64_t> prompt = {1, 17, 42, 5, 88, 23};
  std::string ids;
  for (const int64_t id : prompt) ids += std::to_string(id) + " ";
  TempDir tmp("ft-generate-quantized");
  nlohmann::json jobs = nlohmann::json::array();
  for (const char* format : {"nf4", "fp8"}) {
    jobs.push_back({{"model", (dir / "model").string()},
                    {format, true},
                    {"prompt", prompt},
                    {"max_new_tokens", 24},
                    {"out", (tmp / (std::string(format) + ".json")).string()}});
  }
  // --nf4-compute fp8: the NF4 round trip, then the per-row float8 round trip of that weight and of each input
  jobs.push_back({{"model", (dir / "model").string()},
                  {"nf4", true},
                  {"fp8", true},
                  {"prompt", prompt},
                  {"max_new_tokens", 24},
                  {"out", (tmp / "nf4-fp8.json").string()}});
  const auto py = run(ref_python() + " " + shell_quote(ref_script()) + " generate --jobs " + shell_quote(jobs.dump()));
  ASSERT_EQ(py.exit_code, 0) << py.output;
  for (const std::string format : {"nf4", "fp8", "nf4-fp8"}) {
    SCOPED_TRACE(format);
    const std::string quantize = format == "nf4-fp8" ? "nf4 --nf4-compute fp8" : format;
    const auto r = run_finetune("generate --model " + q(dir / "model") + " --quantize " + quantize + " --prompt-ids " +
                                shell_quote(ids) + " --max-new-tokens 24 --device cpu --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto ours = nlohmann::json::parse(r.output.substr(r.output.find('{')))["generated_ids"];
    const auto theirs = nlohmann::json::parse(read_file(tmp / (format + ".json")))["generated"];
    EXPECT_EQ(ours.get<std::vector<int64_t>>(), theirs.get<std::vector<int64_t>>());
  }
  const auto fp8_alone = run_finetune("generate --model " + q(dir / "model") + " --nf4-compute fp8 --prompt-ids 1");
  EXPECT_EQ(fp8_alone.exit_code, 2) << fp8_alone.output;
  EXPECT_NE(fp8_alone.output.find("--nf4-compute fp8 needs --quantize nf4"), std::string::npos) << fp8_alone.output;
  const auto bad = run_finetune("generate --model " + q(dir / "model") + " --quantize int4 --prompt-ids 1");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--quantize: invalid value 'int4'"), std::string::npos) << bad.output;
}

TEST(CliModel, PromptTextWithoutTokenizerIsAUsageError) {
  const auto r = run_finetune("generate --model " + q(reference_dir() / "llama" / "model") + " --prompt hi --device cpu");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("tokenizer.model"), std::string::npos) << r.output;
}

// What the prompt options refuse is bad input (exit code 2), each with its own message, before or without a run.
TEST(CliModel, EmptyMissingOrOutOfVocabularyPromptsAreUsageErrors) {
  const std::string model = "generate --model " + q(reference_dir() / "llama" / "model") + " --device cpu";
  const auto vocab =
      nlohmann::json::parse(read_file(reference_dir() / "llama" / "model" / "config.json"))["vocab_size"];
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {" --prompt ''", "finetune: error: --prompt is empty"},
      {" --prompt-ids ''", "finetune: error: --prompt-ids is empty"},
      {"", "finetune: error: generate needs --prompt TEXT or --prompt-ids"},
      {" --prompt-ids '1 " + vocab.dump() + "'",
       "finetune: error: --prompt-ids: token id " + vocab.dump() + " is outside the vocabulary of "},
      {" --prompt-ids='-1 2'", "finetune: error: --prompt-ids: token id -1 is outside the vocabulary"},
      // sampling settings: NaN and infinity are refused too, as are a negative temperature and top-p out of (0, 1]
      {" --prompt-ids 1 --temperature nan", "finetune: error: generate: need a finite --temperature >= 0"},
      {" --prompt-ids 1 --temperature inf", "finetune: error: generate: need a finite --temperature >= 0"},
      {" --prompt-ids 1 --temperature 1 --top-p nan", "finetune: error: generate: need a finite --temperature"},
      {" --prompt-ids 1 --top-p 1.5", "finetune: error: generate: need a finite --temperature"},
  };
  for (const auto& c : cases) {
    const auto r = run_finetune(model + c.args + " --max-new-tokens 2");
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << ": " << r.output;
    if (!c.args.empty()) {
      EXPECT_EQ(r.output.find("needs --prompt TEXT"), std::string::npos) << r.output;
    }
  }
  // The last id of the vocabulary is fine.
  const auto last =
      run_finetune(model + " --prompt-ids '1 " + std::to_string(vocab.get<int64_t>() - 1) + "' --max-new-tokens 1");
  EXPECT_EQ(last.exit_code, 0) << last.output;
  // A tiny temperature is sampling from the largest score, not an overflow of every score.
  const auto tiny = run_finetune(model + " --prompt-ids 1 --temperature 1e-30 --max-new-tokens 3 --json");
  const auto greedy = run_finetune(model + " --prompt-ids 1 --max-new-tokens 3 --json");
  ASSERT_EQ(tiny.exit_code, 0) << tiny.output;
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  const auto generated_ids = [](const std::string& output) {
    const size_t begin = output.find("{\"generated_ids\"");
    return nlohmann::json::parse(output.substr(begin, output.find('\n', begin) - begin))["generated_ids"];
  };
  EXPECT_EQ(generated_ids(tiny.output), generated_ids(greedy.output)) << tiny.output;
}

TEST(CliModel, ExportWritesMergedModelThatTransformersLoads) {
  TempDir tmp("ft-export");
  const auto base = tmp / "base";
  std::filesystem::copy(reference_dir() / "qwen2" / "model", base);
  write_file(base / "tokenizer_config.json", R"({"model_max_length": 256})");
  auto model = model::load_pretrained(base, at::kCPU, at::kFloat);
  LoraConfig lora;
  lora.rank = 2;
  lora.targets = {"q_proj", "v_proj", "gate_proj"};
  model::apply_lora(*model, lora, 1);
  at::Tensor ids = at::arange(3, 19, at::kLong).view({2, 8});
  at::Tensor ours;
  {
    at::NoGradGuard g;
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
    for (auto& [name, t] : model::adapter_tensors(*model)) t.normal_(0, 0.3, gen);
    ours = model->forward(ids);
  }
  model::save_adapter(*model, lora, tmp / "adapter", base.string());
  // As training writes it: the adapter carries the tokenizer files it trained with, which win over the base's.
  write_file(tmp / "adapter" / "tokenizer_config.json", R"({"model_max_length": 128})");
  const auto r = run_finetune("export --model " + q(base) + " --adapter " + q(tmp / "adapter") + " --out " +
                              q(tmp / "merged"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_file(tmp / "merged" / "tokenizer_config.json"), R"({"model_max_length": 128})");
  // Each file once in the log, by where it came from.
  EXPECT_NE(r.output.find("tokenizer_config.json (from adapter)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("tokenizer_config.json"), r.output.rfind("tokenizer_config.json")) << r.output;
  EXPECT_TRUE(std::filesystem::exists(tmp / "merged" / "tokenizer_config.json"));
  io::write_safetensors(tmp / "ids.safetensors", {{"input_ids", ids}});
  nlohmann::json jobs = {{{"model", (tmp / "merged").string()}, {"ids", (tmp / "ids.safetensors").string()},
                          {"out", (tmp / "logits.safetensors").string()}}};
  const auto py = run(ref_python() + " " + shell_quote(ref_script()) + " logits --jobs " + shell_quote(jobs.dump()));
  ASSERT_EQ(py.exit_code, 0) << py.output;
  const at::Tensor theirs = io::read_safetensors(tmp / "logits.safetensors").at("logits");
  EXPECT_LT((theirs - ours).abs().max().item<double>(), 1e-4);
  // A second export into the now non-empty directory is refused, and so is one onto a file.
  EXPECT_EQ(run_finetune("export --model " + q(base) + " --adapter " + q(tmp / "adapter") + " --out " +
                         q(tmp / "merged")).exit_code, 2);
  write_file(tmp / "a-file", "");
  const auto onto_file =
      run_finetune("export --model " + q(base) + " --adapter " + q(tmp / "adapter") + " --out " + q(tmp / "a-file"));
  EXPECT_EQ(onto_file.exit_code, 2) << onto_file.output;
  EXPECT_NE(onto_file.output.find("exists and is not a directory"), std::string::npos) << onto_file.output;
  // "DIR/" names DIR.
  const auto slash = run_finetune("export --model " + q(base) + " --adapter " + q(tmp / "adapter") + " --out " +
                                  q((tmp / "slash").string() + "/"));
  EXPECT_EQ(slash.exit_code, 0) << slash.output;
  EXPECT_TRUE(std::filesystem::exists(tmp / "slash" / "config.json")) << slash.output;
}

// An adapter of `model` with random LoRA matrices on q/v/gate, saved to `dir` naming `base` as its base model.
void save_random_adapter(model::Transformer& model, const std::filesystem::path& dir, const std::string& base) {
  LoraConfig lora;
  lora.rank = 2;
  lora.targets = {"q_proj", "v_proj", "gate_proj"};
  model::apply_lora(model, lora, 1);
  {
    at::NoGradGuard g;
    for (auto& [name, t] : model::adapter_tensors(model)) t.normal_(0, 0.3);
  }
  model::save_adapter(model, lora, dir, base);
}

TEST(CliModel, AdapterOfAnotherModelShapeIsRefusedNamingTheTensors) {
  TempDir tmp("ft-adapter-shape");
  const auto base = reference_dir() / "qwen2" / "model";
  model::ModelArgs args = model::load_hf_config(base);
  args.hidden_size = 32;
  args.head_dim = args.hidden_size / args.num_heads;
  model::Transformer other(args);
  save_random_adapter(other, tmp / "adapter", "org/some-hub-model");  // no local base to compare configs with
  for (const std::string& cmd :
       std::vector<std::string>{"export --out " + q(tmp / "merged"), "generate --prompt-ids '1 2 3' --device cpu"}) {
    const auto r = run_finetune(cmd + " --model " + q(base) + " --adapter " + q(tmp / "adapter"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("does not fit the base model (qwen2, hidden_size 64"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("lora_A.weight' is [2, 32], this model needs [2, 64] for r=2"), std::string::npos)
        << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(tmp / "merged"));
}

TEST(CliModel, AdapterTrainedOnAnotherBaseIsRefusedUnlessForced) {
  TempDir tmp("ft-adapter-base");
  const auto base = tmp / "base";
  const auto other = tmp / "other";
  std::filesystem::copy(reference_dir() / "qwen2" / "model", base);
  std::filesystem::copy(base, other);
  auto config = nlohmann::json::parse(read_file(other / "config.json"));
  config["rope_parameters"]["rope_theta"] = 12345.0;  // transformers 5 keeps rope_theta there
  write_file(other / "config.json", config.dump());
  auto model = model::load_pretrained(base, at::kCPU, at::kFloat);
  save_random_adapter(*model, tmp / "adapter", base.string());

  const auto refused = run_finetune("export --model " + q(other) + " --adapter " + q(tmp / "adapter") + " --out " +
                                    q(tmp / "merged"));
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("was trained on " + base.string()), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("rope_theta"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("--force"), std::string::npos) << refused.output;
  EXPECT_FALSE(std::filesystem::exists(tmp / "merged"));
  const auto generate = run_finetune("generate --model " + q(other) + " --adapter " + q(tmp / "adapter") +
                                     " --prompt-ids '1 2 3' --max-new-tokens 2 --device cpu");
  EXPECT_EQ(generate.exit_code, 2) << generate.output;

  const auto forced = run_finetune("export --force --model " + q(other) + " --adapter " + q(tmp / "adapter") +
                                   " --out " + q(tmp / "merged"));
  EXPECT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_NE(forced.output.find("--force: applying it anyway"), std::string::npos) << forced.output;
  // Its own base passes without --force.
  EXPECT_EQ(run_finetune("export --model " + q(base) + " --adapter " + q(tmp / "adapter") + " --out " +
                         q(tmp / "merged2")).exit_code, 0);
}

}  // namespace
}  // namespace ft::test
