// A chat fine-tune through transformers and back (tokenizers, chat templates, LoRA export): a tiny random Llama
// with a byte-level tokenizer.json in the style of Llama 3 or Qwen2.5 and that family's real chat template
// (tests/train/ref/chat_roundtrip.py) is LoRA-trained on chat data with data.template auto; transformers'
// AutoTokenizer (from the exported adapter directory) prompts it with apply_chat_template as `finetune generate
// --chat` does, and AutoModelForCausalLM + PEFT generate greedily the same ids; eval.prompts are prompted the
// same way during training.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "train/train_support.h"

namespace ft::test {
namespace {

class ChatRoundTrip : public ::testing::TestWithParam<std::string> {
 protected:
  TempDir dir_{"ft-chat-rt"};
};

TEST_P(ChatRoundTrip, LoraChatFineTuneGeneratesAsTransformersWithPeft) {
  const auto script = shell_quote((source_dir() / "tests/train/ref/chat_roundtrip.py").string());
  const auto made = run(python() + " " + script + " make " + GetParam() + " " + shell_quote(dir_.path().string()));
  if (made.exit_code != 0) GTEST_SKIP() << "reference packages missing: " << made.output.substr(0, 300);
  const auto d = dir_.path();
  const auto config = d / "rt.yaml";
  std::ofstream(config) << "run: {name: rt, output_dir: " << (d / "run").string() << ", seed: 0, device: cpu}\n"
                        << "model: {path: " << (d / "model").string() << "}\n"
                        << "lora: {enabled: true, rank: 8, alpha: 16, dropout: 0.0,\n"
                        << "       targets: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}\n"
                        << "data: {train: [{path: " << (d / "chat.jsonl").string() << ", format: chat}],\n"
                        << "       eval: [{path: " << (d / "chat.jsonl").string() << ", format: chat}],\n"
                        << "       template: auto, seq_len: 96, cache_dir: " << (d / "cache").string() << "}\n"
                        << "train: {max_steps: 30, micro_batch_size: 16, precision: fp32}\n"
                        << "optimizer: {lr: 1.0e-2}\nscheduler: {type: constant}\n"
                        << "checkpoint: {every_steps: 0, resume: never}\n"
                        << "eval: {every_steps: 0, max_new_tokens: 8, prompts: ['Reverse: red cat sun',\n"
                        << "       [{role: system, content: Answer briefly.}, {role: user, content: 'Reverse: red cat sun'}]]}\n"
                        << "logging: {every_steps: 10, progress: \"off\"}\n";
  const auto trained = run(train_cmd(config));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_NE(trained.output.find("chat template: the model's own"), std::string::npos) << trained.output;
  EXPECT_NE(trained.output.find("tokenizer.json"), std::string::npos) << trained.output;
  const auto adapter = d / "run" / "adapter";
  ASSERT_TRUE(std::filesystem::exists(adapter / "tokenizer.json"));
  const auto generated =
      run_finetune("generate --model " + shell_quote((d / "model").string()) + " --adapter " +
                   shell_quote(adapter.string()) + " --chat --prompt 'Reverse: red cat sun' --max-new-tokens 8 --json");
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  std::ofstream(d / "ours.json") << generated.output.substr(generated.output.find('{'));
  const auto checked = run(python() + " " + script + " check " + shell_quote((d / "model").string()) + " " +
                           shell_quote(adapter.string()) + " " + shell_quote((d / "ours.json").string()));
  EXPECT_EQ(checked.exit_code, 0) << "ours: " << generated.output << "\ntransformers: " << checked.output;

  // eval.prompts on chat data are prompted in the same template: the final evaluation's samples are the completions
  // `generate --chat` gives for that prompt, as a string and as turns with a system turn.
  std::vector<std::string> completions;
  std::ifstream metrics(d / "run" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto m = nlohmann::json::parse(line);
    if (m.at("event") == "eval" && m.contains("samples")) {
      completions.clear();
      for (const auto& sample : m.at("samples")) completions.push_back(sample.at("completion").get<std::string>());
    }
  }
  ASSERT_EQ(completions.size(), 2u);
  const auto ours = nlohmann::json::parse(generated.output.substr(generated.output.find('{')));
  EXPECT_EQ(completions[0], ours.at("text").get<std::string>());
  const auto with_system =
      run_finetune("generate --model " + shell_quote((d / "model").string()) + " --adapter " +
                   shell_quote(adapter.string()) +
                   " --chat --system 'Answer briefly.' --prompt 'Reverse: red cat sun' --max-new-tokens 8 --json");
  ASSERT_EQ(with_system.exit_code, 0) << with_system.output;
  const auto system_json = nlohmann::json::parse(with_system.output.substr(with_system.output.find('{')));
  EXPECT_EQ(completions[1], system_json.at("text").get<std::string>());
}

INSTANTIATE_TEST_SUITE_P(Styles, ChatRoundTrip, ::testing::Values("llama3", "qwen2"));

}  // namespace
}  // namespace ft::test
