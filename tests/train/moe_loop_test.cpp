// `finetune train` end to end on the CPU with a mixture-of-experts model (qwen3_moe from scratch, the router's
// load-balancing loss on): the aux loss logged apart and a bit-exact resume after SIGTERM; and without the aux loss,
// gradient accumulation and two gloo ranks equal to one batch.
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>

#include "train/train_support.h"

namespace ft::test {
namespace {

const std::string kMoe =
    "model.architecture=qwen3_moe model.num_experts=4 model.num_experts_per_tok=2 model.moe_intermediate_size=32 "
    "model.router_aux_loss=on ";

class MoeTrainLoop : public TinyRunTest {};

// The "aux_loss" of every train event of a run.
std::vector<double> aux_losses(const std::filesystem::path& run_dir) {
  std::vector<double> out;
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("event") == "train" && j.contains("aux_loss")) out.push_back(j.at("aux_loss").get<double>());
  }
  return out;
}

TEST_F(MoeTrainLoop, LogsTheAuxLossAndResumesBitExactly) {
  const std::string steps = kMoe + "train.max_steps=12 checkpoint.every_steps=4";
  const auto reference = write_config("reference");
  const auto ref = run(train_cmd(reference, steps));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  const auto expected = losses(dir_ / "reference");
  ASSERT_EQ(expected.size(), 12u);
  EXPECT_LT(expected.rbegin()->second, expected.begin()->second) << "the loss did not fall";
  const auto aux = aux_losses(dir_ / "reference");
  ASSERT_EQ(aux.size(), 12u) << "every train event logs aux_loss";
  for (double a : aux) EXPECT_GE(a, 1.0) << "num_experts * sum f_e P_e is at least 1 for top-2 of 4";

  const auto term = write_config("term");
  EXPECT_EQ(run_and_signal(train_cmd(term, steps), dir_ / "term", 6, SIGTERM), 130);
  const auto resumed = run(train_cmd(term, steps));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  expect_same_losses(expected, losses(dir_ / "term"), 0.0);
}

// Dropless routing computes every token's experts whatever batch it shares, so without the aux loss one batch of 16,
// accumulation of 2 x 8 and two gloo ranks x 8 train alike, as for the dense models. (With the aux loss they differ
// by design: each micro-batch's aux is a product of its own means, and the ranks' micro-batches hold other rows
// than the accumulation's.)
TEST_F(MoeTrainLoop, WithoutAuxLossOneBatchAccumulationAndTwoGlooRanksMatch) {
  const std::string fixed = "checkpoint: {every_steps: 0, keep_last: 1, resume: never}\n";
  const std::string moe = kMoe + "model.router_aux_loss=off train.max_steps=8 ";
  const auto big = write_config("big", fixed);
  ASSERT_EQ(run(train_cmd(big, moe + "train.micro_batch_size=16")).exit_code, 0);
  const auto accum = write_config("accum", fixed);
  const auto one = run(train_cmd(accum, moe + "train.micro_batch_size=8 train.grad_accum_steps=2"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  expect_same_losses(losses(dir_ / "big"), losses(dir_ / "accum"), 1e-5);
  EXPECT_LE(max_weight_diff(dir_ / "big", dir_ / "accum"), 1e-6);
  const auto ranks = write_config("ranks", fixed);
  const auto two = run(train_cmd(ranks, "--nproc-per-node 2 " + moe + "train.micro_batch_size=8"));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  expect_same_losses(losses(dir_ / "big"), losses(dir_ / "ranks"), 1e-5);
  EXPECT_LE(max_weight_diff(dir_ / "big", dir_ / "ranks"), 1e-6);
  EXPECT_TRUE(aux_losses(dir_ / "ranks").empty()) << "aux_loss logged with model.router_aux_loss=off";
}

// LoRA on the attention, the experts' fused weights and the routers of a model pretrained here for six steps: the
// loss falls, the run's adapter names them as PEFT's target_modules and target_parameters, and a run stopped by
// SIGTERM resumes from its adapter checkpoint to the same losses bit for bit.
TEST_F(MoeTrainLoop, LoraOnExpertsAndRoutersTrainsAndResumesBitExactly) {
  const auto base = write_config("base", "checkpoint: {every_steps: 0, resume: never}\n");
  const auto pretrained = run(train_cmd(base, kMoe + "train.max_steps=6"));
  ASSERT_EQ(pretrained.exit_code, 0) << pretrained.output;
  const auto lora_config = [&](const std::string& name) {
    const auto config = dir_ / (name + ".yaml");
    std::ofstream(config) << "run: {output_dir: " << (dir_ / name).string()
                          << ", seed: 5, device: cpu, deterministic: true}\n"
                          << "model: {path: " << (dir_ / "base" / "model").string() << ", router_aux_loss: on}\n"
                          << "lora: {enabled: true, rank: 4, alpha: 8, targets: [q_proj, v_proj, gate_up_proj, "
                             "down_proj, gate]}\n"
                          << "data: {synth: {task: reverse, train_samples: 400, seed: 2}, train: [{format: "
                             "prompt_completion}], seq_len: 32, cache_dir: "
                          << (dir_ / "cache").string() << "}\n"
                          << "train: {max_steps: 10, micro_batch_size: 8}\noptimizer: {lr: 1.0e-2}\n"
                          << "checkpoint: {every_steps: 4}\nlogging: {every_steps: 1, progress: off}\n";
    return config;
  };
  const auto r = run(train_cmd(lora_config("lora")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto expected = losses(dir_ / "lora");
  ASSERT_EQ(expected.size(), 10u);
  EXPECT_LT(expected.rbegin()->second, expected.begin()->second) << "the loss did not fall";
  const auto adapter = nlohmann::json::parse(read_file(dir_ / "lora" / "adapter" / "adapter_config.json"));
  EXPECT_EQ(adapter.at("target_modules"), nlohmann::json({"q_proj", "v_proj"}));
  EXPECT_EQ(adapter.at("target_parameters"), nlohmann::json({"down_proj", "gate.weight", "gate_up_proj"}));

  const auto term = lora_config("term");
  EXPECT_EQ(run_and_signal(train_cmd(term), dir_ / "term", 5, SIGTERM), 130);
  const auto resumed = run(train_cmd(term));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  expect_same_losses(expected, losses(dir_ / "term"), 0.0);
}

}  // namespace
}  // namespace ft::test
