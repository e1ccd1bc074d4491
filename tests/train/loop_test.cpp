// `finetune train` end to end on the CPU: exact resume after SIGTERM and kill -9, gradient accumulation and data
// parallelism against one big batch, the PyTorch reference loss curve, and the non-finite loss stop.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/synth.h"
#include "io/safetensors.h"
#include "train/train_support.h"
#include "util/fmt.h"

namespace ft::test {
namespace {

class TrainLoop : public TinyRunTest {
 protected:
  // Runs each of `runs` (name -> overrides, after `common`) for `steps` steps from the tiny config plus `fixed`;
  // returns each run's mean loss over its last `tail` steps (and, with `outputs`, what each run printed).
  std::map<std::string, double> final_losses(const std::map<std::string, std::string>& runs, const std::string& fixed,
                                             const std::string& common, size_t steps, size_t tail,
                                             std::map<std::string, std::string>* outputs = nullptr) {
    std::map<std::string, double> out;
    for (const auto& [name, overrides] : runs) {
      const auto result = run(train_cmd(write_config(name, fixed), common + overrides));
      EXPECT_EQ(result.exit_code, 0) << result.output;
      if (outputs) (*outputs)[name] = result.output;
      const auto l = losses(dir_ / name);
      EXPECT_EQ(l.size(), steps) << name;
      if (l.size() < tail) continue;
      double sum = 0;
      for (auto it = l.rbegin(); it != std::next(l.rbegin(), static_cast<std::ptrdiff_t>(tail)); ++it)
        sum += it->second;
      out[name] = sum / static_cast<double>(tail);
    }
    return out;
  }
};

TEST_F(TrainLoop, ResumeAfterSigtermAndAfterKill9GivesBitIdenticalLosses) {
  const auto reference = write_config("reference");
  ASSERT_EQ(run(train_cmd(reference)).exit_code, 0);
  const auto expected = losses(dir_ / "reference");
  ASSERT_EQ(expected.size(), 60u);

  // SIGTERM: the step finishes, a checkpoint is written, exit code 130; the resumed run completes. Checkpoints are
  // written in the background (the reference wrote them synchronously): the exit waits for the last one.
  const std::string background = "checkpoint.async=on";
  const auto term = write_config("term");
  EXPECT_EQ(run_and_signal(train_cmd(term, background), dir_ / "term", 23, SIGTERM), 130);
  const auto resumed = run(train_cmd(term, background));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("written in the background"), std::string::npos) << resumed.output;
  expect_same_losses(expected, losses(dir_ / "term"), 0.0);

  // kill -9: whatever the moment, also during a background write, the newest complete checkpoint (step 30 or 40)
  // is intact and resumable.
  const auto kill9 = write_config("kill9");
  EXPECT_EQ(run_and_signal(train_cmd(kill9, background), dir_ / "kill9", 37, SIGKILL), 128 + SIGKILL);
  const auto after_kill = run(train_cmd(kill9));
  ASSERT_EQ(after_kill.exit_code, 0) << after_kill.output;
  expect_same_losses(expected, losses(dir_ / "kill9"), 0.0);
}

// One process with micro-batch 16 against accumulation 2 x 8, and against 2 ranks x 8 started by the built-in
// launcher and by torchrun: the same losses at every step and the same final weights.
TEST_F(TrainLoop, GradientAccumulationAndTwoGlooRanksMatchOneBigBatch) {
  const std::string fixed = "checkpoint: {every_steps: 0, keep_last: 1, resume: never}\n";
  const auto big = write_config("big", fixed);
  ASSERT_EQ(run(train_cmd(big, "train.max_steps=20 train.micro_batch_size=16")).exit_code, 0);
  const auto accum = write_config("accum", fixed);
  ASSERT_EQ(run(train_cmd(accum, "train.max_steps=20 train.micro_batch_size=8 train.grad_accum_steps=2")).exit_code, 0);
  expect_same_losses(losses(dir_ / "big"), losses(dir_ / "accum"), 1e-5);
  EXPECT_LE(max_weight_diff(dir_ / "big", dir_ / "accum"), 1e-6);

  const auto ranks = write_config("ranks", fixed);
  const auto two = run(train_cmd(ranks, "--nproc-per-node 2 train.max_steps=20 train.micro_batch_size=8"));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  expect_same_losses(losses(dir_ / "big"), losses(dir_ / "ranks"), 1e-5);
  EXPECT_LE(max_weight_diff(dir_ / "big", dir_ / "ranks"), 1e-6);

  const auto torchrun = write_config("torchrun", fixed);
  const auto under_torchrun =
      run(python() + " -m torch.distributed.run --nproc-per-node 2 --master-addr 127.0.0.1 --master-port " +
          std::to_string(free_port()) + " --no-python " +
          train_cmd(torchrun, "train.max_steps=20 train.micro_batch_size=8") + " 2>&1");
  ASSERT_EQ(under_torchrun.exit_code, 0) << under_torchrun.output;
  expect_same_losses(losses(dir_ / "ranks"), losses(dir_ / "torchrun"), 0.0);
  EXPECT_LE(max_weight_diff(dir_ / "ranks", dir_ / "torchrun"), 0.0) << "the same computation, launched differently";
}

// distributed.zero=1 on 2 Gloo ranks: each rank keeps the optimizer state of its own parameters only, and training
// is bit-identical to replicated DDP, also when stopped by SIGTERM and resumed, and when a sharded checkpoint is
// resumed without ZeRO-1. A constant schedule makes a 20-step run the prefix of a 30-step one.
TEST_F(TrainLoop, ZeroOneShardsOptimizerStateAndTrainsBitIdenticallyToDdp) {
  const std::string two = "--nproc-per-node 2 scheduler.type=constant train.max_steps=30 ";
  const auto replicated = write_config("replicated");
  ASSERT_EQ(run(train_cmd(replicated, two)).exit_code, 0);
  const auto expected = losses(dir_ / "replicated");
  ASSERT_EQ(expected.size(), 30u);

  // Every rank writes its shard in the background; rank 0 publishes once both are on disk.
  const auto zero = write_config("zero");
  const std::string zero_one = two + "distributed.zero=1 checkpoint.async=on";
  EXPECT_EQ(run_and_signal(train_cmd(zero, zero_one), dir_ / "zero", 13, SIGTERM), 130);
  const auto resumed = run(train_cmd(zero, zero_one));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("ZeRO-1: optimizer state for"), std::string::npos) << resumed.output;
  expect_same_losses(expected, losses(dir_ / "zero"), 0.0);
  EXPECT_EQ(max_weight_diff(dir_ / "replicated", dir_ / "zero"), 0.0);

  // Each rank saved the state of its own parameters: together as large as the replicated file, each about half.
  const auto sharded = dir_ / "zero" / "checkpoints" / "step-000030";
  const auto full =
      std::filesystem::file_size(dir_ / "replicated" / "checkpoints" / "step-000030" / "optimizer.safetensors");
  EXPECT_FALSE(std::filesystem::exists(sharded / "optimizer.safetensors"));
  const auto rank0 = std::filesystem::file_size(sharded / "optimizer.rank0.safetensors");
  const auto rank1 = std::filesystem::file_size(sharded / "optimizer.rank1.safetensors");
  EXPECT_LT(rank0, full * 3 / 4);
  EXPECT_LT(rank1, full * 3 / 4);
  EXPECT_GT(rank0 + rank1, full * 9 / 10);

  // A sharded checkpoint of step 20 resumed by a replicated run.
  const auto mixed = write_config("mixed");
  ASSERT_EQ(run(train_cmd(mixed, "--nproc-per-node 2 scheduler.type=constant train.max_steps=20 distributed.zero=1"))
                .exit_code,
            0);
  const auto continued = run(train_cmd(mixed, two));
  ASSERT_EQ(continued.exit_code, 0) << continued.output;
  EXPECT_NE(continued.output.find("resumed from"), std::string::npos) << continued.output;
  expect_same_losses(expected, losses(dir_ / "mixed"), 0.0);
}

// The model directory a run exports loads in transformers, whose AutoTokenizer encodes like our sentencepiece model.
TEST_F(TrainLoop, ExportedTokenizerLoadsInTransformersWithTheSameIds) {
  const auto config = write_config("export", "checkpoint: {every_steps: 0, keep_last: 1, resume: never}\n");
  ASSERT_EQ(run(train_cmd(config, "train.max_steps=3 scheduler.warmup_steps=1")).exit_code, 0);
  const auto checked =
      run(python() + " " + shell_quote((source_dir() / "tests/train/ref/check_tokenizer.py").string()) + " " +
          shell_quote((dir_ / "export" / "model").string()) +
          " 'reverse: 3 1 4 1 5 ->' '9 8 7' 'Hello, world: tabs\there, digits 0123' 'ünïcödé'");
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
  EXPECT_NE(checked.output.find("bos 1 eos 2"), std::string::npos) << checked.output;
}

// The saved model names its special tokens (config.json, generation_config.json), so transformers' own generate()
// stops at the EOS where `finetune generate` stops, for prompts of the task it learned.
TEST_F(TrainLoop, SavedModelStopsInTransformersGenerateWhereOursStops) {
  const auto config = write_config("stop", "checkpoint: {every_steps: 0, keep_last: 1}\n");
  const auto trained =
      run(train_cmd(config, "train.max_steps=250 train.micro_batch_size=16 optimizer.lr=4.0e-3 logging.every_steps=50"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto model_dir = dir_ / "stop" / "model";
  const auto generation = nlohmann::json::parse(read_file(model_dir / "generation_config.json"));
  EXPECT_EQ(generation["eos_token_id"], 2) << generation.dump();
  EXPECT_EQ(nlohmann::json::parse(read_file(model_dir / "config.json"))["eos_token_id"], 2);
  constexpr int kMaxNew = 24;
  std::vector<std::vector<int64_t>> ours;
  std::string prompt_args;
  for (const char* prompt : {"Reverse: 3 1 4 1 5\nAnswer:", "Reverse: 2 7 1 8\nAnswer:", "Reverse: 9 9 1\nAnswer:",
                             "Reverse: 5 0 3 8 8 2\nAnswer:"}) {
    const auto r = run(shell_quote(binary()) + " generate --model " + shell_quote(model_dir.string()) + " --prompt " +
                       shell_quote(prompt) + " --max-new-tokens " + std::to_string(kMaxNew) + " --device cpu --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output.substr(r.output.rfind("{\"generated_ids\"")));
    ours.push_back(j["generated_ids"].get<std::vector<int64_t>>());
    std::string ids;
    for (const auto& id : j["prompt_ids"]) ids += std::to_string(id.get<int64_t>()) + " ";
    prompt_args += " " + shell_quote(ids);
  }
  const auto theirs = run(python() + " " + shell_quote((source_dir() / "tests/train/ref/generate_stop.py").string()) +
                          " " + shell_quote(model_dir.string()) + " " + std::to_string(kMaxNew) + prompt_args);
  ASSERT_EQ(theirs.exit_code, 0) << theirs.output;
  const auto t = nlohmann::json::parse(theirs.output.substr(theirs.output.rfind("{\"generated_ids\"")));
  EXPECT_EQ(t["generated_ids"].get<std::vector<std::vector<int64_t>>>(), ours);
  int stopped = 0;
  for (const auto& generated : ours) {
    if (!generated.empty() && generated.back() == 2 && generated.size() < static_cast<size_t>(kMaxNew)) ++stopped;
  }
  EXPECT_GE(stopped, 3) << "the trained model should end its answers with EOS before the token limit";
}

// checkpoint.keep_best with keep_last 1: the newest checkpoint and the one whose own step had the lowest eval loss
// survive. The learning rate warms up to a value far too high for this model, so the eval loss falls and then rises
// well above its low (2.0 at step 30, 3.9 at step 50 here): rounding-level changes to the updates move the low, not
// the rise.
TEST_F(TrainLoop, KeepBestKeepsTheNewestAndTheLowestEvalLossCheckpoint) {
  const auto config = write_config("best");
  const auto result = run(train_cmd(
      config,
      "train.max_steps=50 scheduler.type=linear scheduler.warmup_steps=50 optimizer.lr=1.0 data.synth.eval_samples=64 "
      "'data.eval=[{format: prompt_completion}]' eval.every_steps=10 eval.max_batches=2 "
      "checkpoint.every_steps=10 checkpoint.keep_last=1 checkpoint.keep_best=true"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::map<int64_t, double> eval_loss;
  std::ifstream in(dir_ / "best" / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("event") == "eval") {
      eval_loss[j.at("step").get<int64_t>()] = j.at("loss").get<double>();
      // How long each evaluation took, and its generation part.
      EXPECT_GE(j.at("eval_s").get<double>(), j.at("generate_s").get<double>()) << line;
      EXPECT_GE(j.at("generate_s").get<double>(), 0.0) << line;
    }
    if (j.at("event") == "start") {  // the time to the first step and its parts
      EXPECT_GE(j.at("setup_s").get<double>(), j.at("model_s").get<double>() + j.at("data_s").get<double>()) << line;
    }
  }
  EXPECT_NE(result.output.find("s of it generating)"), std::string::npos) << result.output;
  ASSERT_EQ(eval_loss.size(), 5u);
  const auto best = std::min_element(eval_loss.begin(), eval_loss.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  std::string losses;
  for (const auto& [step, loss] : eval_loss) losses += fmt::format(" {}: {:.4f}", step, loss);
  ASSERT_NE(best->first, 50) << "the last evaluation is the best: this run does not test keep_best;" << losses;
  std::set<std::string> expected{"step-000050", fmt::format("step-{:06d}", best->first)};
  std::set<std::string> kept;
  for (const auto& entry : std::filesystem::directory_iterator(dir_ / "best" / "checkpoints")) {
    kept.insert(entry.path().filename().string());
  }
  EXPECT_EQ(kept, expected) << "best eval loss at step " << best->first;
}

// The evaluation generates in batches (model::generate_batch, prompts of different lengths left-padded): its exact
// match and its samples are what `finetune generate` gives for each prompt alone on the final model, which the last
// evaluation saw.
TEST_F(TrainLoop, EvalGenerationsAreWhatGenerateGivesOnePromptAtATime) {
  const std::vector<std::pair<std::string, std::string>> problems = {
      {"Reverse: 3 1 4 1 5\nAnswer:", " 5 1 4 1 3"},         {"Reverse: 2 7\nAnswer:", " 7 2"},
      {"Reverse: 9 9 1 0 4 4 2\nAnswer:", " 2 4 4 0 1 9 9"}, {"Reverse: 6 2 8\nAnswer:", " 8 2 6"},
      {"Reverse: 5 0 3 8 8 2\nAnswer:", " 2 8 8 3 0 5"},     {"Reverse: 1 1 2 3\nAnswer:", " 3 2 1 1"}};
  std::string jsonl;
  nlohmann::json prompts = nlohmann::json::array();
  for (const auto& [prompt, completion] : problems) {
    jsonl += nlohmann::json{{"prompt", prompt}, {"completion", completion}}.dump() + "\n";
    prompts.push_back(prompt);
  }
  write_file(dir_ / "eval.jsonl", jsonl);
  constexpr int kMaxNew = 16;
  const auto config = write_config(
      "evalgen",
      "checkpoint: {every_steps: 0, keep_last: 1, resume: never}\neval: " +
          nlohmann::json{{"exact_match_samples", problems.size()}, {"max_new_tokens", kMaxNew}, {"prompts", prompts}}
              .dump() +
          "\n");
  const auto trained = run(train_cmd(config,
                                     "train.max_steps=150 train.micro_batch_size=16 optimizer.lr=4.0e-3 "
                                     "logging.every_steps=50 'data.eval=[{path: " +
                                         (dir_ / "eval.jsonl").string() + ", format: prompt_completion}]'"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  std::optional<nlohmann::json> last_eval;
  std::ifstream in(dir_ / "evalgen" / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("event") == "eval") last_eval = j;
  }
  ASSERT_TRUE(last_eval.has_value());
  ASSERT_EQ(last_eval->at("samples").size(), problems.size());
  int correct = 0;
  for (size_t i = 0; i < problems.size(); ++i) {
    const auto r =
        run(shell_quote(binary()) + " generate --model " + shell_quote((dir_ / "evalgen" / "model").string()) +
            " --prompt " + shell_quote(problems[i].first) + " --max-new-tokens " + std::to_string(kMaxNew) +
            " --device cpu --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto text = nlohmann::json::parse(r.output.substr(r.output.rfind("{\"generated_ids\"")))["text"];
    EXPECT_EQ(last_eval->at("samples")[i].at("completion"), text) << problems[i].first;
    if (data::exact_match(text.get<std::string>(), problems[i].second)) ++correct;
  }
  EXPECT_DOUBLE_EQ(last_eval->at("exact_match").get<double>(), static_cast<double>(correct) / problems.size());
}

// logging.progress=auto: on a terminal (a pseudo-terminal from script(1)) a redrawn bar with ETA that log lines
// replace rather than follow on the same line; through a pipe, plain log lines.
TEST_F(TrainLoop, ProgressBarOnATerminalAndPlainLinesOtherwise) {
  const auto config = write_config("progress", "checkpoint: {every_steps: 6, keep_last: 1, resume: never}\n");
  const std::string args = "train.max_steps=12 scheduler.warmup_steps=2 logging.every_steps=3 logging.progress=auto";
  const auto tty = run("script -qec " + shell_quote(train_cmd(config, args)) + " /dev/null");
  ASSERT_EQ(tty.exit_code, 0) << tty.output;
  EXPECT_NE(tty.output.find("] 100% step 12/12 | loss "), std::string::npos) << tty.output;
  EXPECT_NE(tty.output.find("| ETA "), std::string::npos) << tty.output;
  std::istringstream lines(tty.output);
  int log_lines = 0;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // the terminal's CR LF
    const std::string visible = line.substr(line.rfind('\r') == std::string::npos ? 0 : line.rfind('\r'));
    if (visible.find("checkpoint saved") == std::string::npos) continue;
    ++log_lines;
    EXPECT_EQ(visible.find("% step"), std::string::npos) << "a log line drawn after the bar: " << line;
  }
  EXPECT_EQ(log_lines, 2);

  const auto piped = run(train_cmd(config, args + " run.output_dir=" + (dir_ / "piped").string()));
  ASSERT_EQ(piped.exit_code, 0) << piped.output;
  EXPECT_NE(piped.output.find(" step 12/12 | loss "), std::string::npos) << piped.output;
  EXPECT_EQ(piped.output.find("] 100%"), std::string::npos) << piped.output;
  EXPECT_EQ(piped.output.find('\r'), std::string::npos) << piped.output;
}

// Resuming refuses another world size or a changed model shape with exit code 2 and a reason, leaving the checkpoint
// as it was; a changed learning rate or max_steps resumes.
TEST_F(TrainLoop, ResumeRefusesAnotherWorldSizeOrModelShapeButAcceptsNewLrAndMaxSteps) {
  const auto config = write_config("resume");
  const std::string two = "--nproc-per-node 2 scheduler.warmup_steps=2 ";
  ASSERT_EQ(run(train_cmd(config, two + "train.max_steps=10")).exit_code, 0);
  const auto checkpoints = dir_ / "resume" / "checkpoints";
  const auto manifest = read_file(checkpoints / "step-000010" / "manifest.json");

  const auto one = run(train_cmd(config, "scheduler.warmup_steps=2 train.max_steps=20"));
  EXPECT_EQ(one.exit_code, 2) << one.output;
  EXPECT_NE(one.output.find("it was written by 2 processes, this run has 1"), std::string::npos) << one.output;

  const auto wider = run(train_cmd(config, two + "train.max_steps=20 model.intermediate_size=256"));
  EXPECT_EQ(wider.exit_code, 2) << wider.output;
  EXPECT_NE(wider.output.find("settings that must stay the same on resume"), std::string::npos) << wider.output;
  EXPECT_NE(wider.output.find("model.intermediate_size: 128 -> 256"), std::string::npos) << wider.output;

  std::set<std::string> kept;
  for (const auto& entry : std::filesystem::directory_iterator(checkpoints)) {
    kept.insert(entry.path().filename().string());
  }
  EXPECT_EQ(kept, std::set<std::string>{"step-000010"});
  EXPECT_EQ(read_file(checkpoints / "step-000010" / "manifest.json"), manifest);

  // An explicit checkpoint.resume that fails verification (a truncated copy) is refused on every rank.
  const auto broken = dir_ / "broken-step";
  std::filesystem::copy(checkpoints / "step-000010", broken, std::filesystem::copy_options::recursive);
  std::filesystem::resize_file(broken / "rng.safetensors", 8);
  const auto refused =
      run(train_cmd(config, two + "train.max_steps=20 checkpoint.resume=" + shell_quote(broken.string())));
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("is not a valid checkpoint: rng.safetensors: size 8 != "), std::string::npos)
      << refused.output;

  const auto resumed = run(train_cmd(config, two + "train.max_steps=20 optimizer.lr=1.0e-3"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_EQ(losses(dir_ / "resume").rbegin()->first, 20);
}

TEST_F(TrainLoop, NonFiniteLossStopsNamingTheStepAndKeepsCheckpoints) {
  const auto config = write_config("nan", "checkpoint: {every_steps: 0, keep_last: 1, resume: never}\n");
  const auto result = run(train_cmd(config, "model.init_std=1.0e30"));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("non-finite loss at step 1"), std::string::npos) << result.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "nan" / "checkpoints" / "step-000001"));
}

// A long run at a small learning rate, where bf16 rounds most AdamW updates away: bf16-pure falls behind F32
// master weights (train.precision bf16), and bf16-pure with optimizer.kahan_summation keeps up with them, with F32 or
// with 8-bit moments (optimizer.name adamw_8bit).
TEST_F(TrainLoop, KahanSummationKeepsBf16WeightsOnTheF32MasterTrajectory) {
  const std::string fixed =
      "checkpoint: {every_steps: 0, keep_last: 1, resume: never}\n"
      "scheduler: {type: constant, warmup_steps: 0}\n";
  const std::string common = "train.max_steps=60 optimizer.lr=1.0e-4 optimizer.weight_decay=0 ";
  const std::string kahan = "train.precision=bf16-pure optimizer.kahan_summation=true";
  const std::map<std::string, std::string> runs = {{"master", "train.precision=bf16"},
                                                   {"pure", "train.precision=bf16-pure"},
                                                   {"kahan", kahan},
                                                   {"kahan8", kahan + " optimizer.name=adamw_8bit"}};
  std::map<std::string, std::string> outputs;
  std::map<std::string, double> final_loss = final_losses(runs, fixed, common, 60, 10, &outputs);  // last 10's mean
  ASSERT_EQ(final_loss.size(), runs.size());
  // The model is drawn in F32: the Kahan runs start their compensation at what the cast to bf16 dropped, so even the
  // first steps, whose updates are far below bf16's spacing, move their weights as the master's move (from a zero
  // compensation the gap reaches 0.19 % by step 4 here; started at the cast's residual it stays below 0.02 %).
  EXPECT_NE(outputs["kahan"].find("the compensation of"), std::string::npos) << outputs["kahan"];
  const auto master_losses = losses(dir_ / "master"), kahan_losses = losses(dir_ / "kahan");
  for (int step = 1; step <= 10; ++step) {
    EXPECT_LT(std::abs(kahan_losses.at(step) - master_losses.at(step)), 5e-4 * master_losses.at(step)) << step;
  }
  const double start = master_losses.begin()->second;
  const double learned = start - final_loss["master"];
  ASSERT_GT(learned, 0.05) << "the master run should learn at this rate";
  std::cerr << "losses from " << start << ": master " << final_loss["master"] << ", kahan " << final_loss["kahan"]
            << ", kahan with 8-bit moments " << final_loss["kahan8"] << ", pure " << final_loss["pure"] << "\n";
  const double pure_gap = std::abs(final_loss["pure"] - final_loss["master"]);
  for (const char* name : {"kahan", "kahan8"}) {
    const double gap = std::abs(final_loss[name] - final_loss["master"]);
    EXPECT_LT(gap, 0.005 * final_loss["master"])
        << name << " " << final_loss[name] << ", master " << final_loss["master"];
    EXPECT_GT(pure_gap, 3.0 * gap) << "pure " << final_loss["pure"] << ", " << name << " " << final_loss[name]
                                   << ", master " << final_loss["master"];
  }
}

// optimizer.name adamw_8bit: the one-byte moments and their block scales go into the checkpoint, and a run stopped by
// SIGTERM resumes to the uninterrupted run's losses bit for bit.
TEST_F(TrainLoop, AdamW8bitCheckpointsItsByteMomentsAndResumesBitExactly) {
  const std::string eight = "optimizer.name=adamw_8bit train.max_steps=30";
  const auto reference = write_config("eight");
  ASSERT_EQ(run(train_cmd(reference, eight)).exit_code, 0);
  const auto expected = losses(dir_ / "eight");
  ASSERT_EQ(expected.size(), 30u);
  const auto term = write_config("eight-term");
  EXPECT_EQ(run_and_signal(train_cmd(term, eight), dir_ / "eight-term", 13, SIGTERM), 130);
  const auto resumed = run(train_cmd(term, eight));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("optimizer: adamw_8bit: 8-bit moments for "), std::string::npos) << resumed.output;
  expect_same_losses(expected, losses(dir_ / "eight-term"), 0.0);
  const auto state = io::read_safetensors(dir_ / "eight" / "checkpoints" / "step-000030" / "optimizer.safetensors");
  size_t byte_moments = 0;
  for (const auto& [key, t] : state) {
    if (key.size() > 15 && key.compare(key.size() - 15, 15, ".exp_avg.absmax") == 0) {
      ++byte_moments;
      EXPECT_EQ(state.at(key.substr(0, key.size() - 7)).scalar_type(), at::kByte) << key;
    }
  }
  EXPECT_GT(byte_moments, 0u);
  // A checkpoint of 8-bit moments does not resume a run with F32 ones.
  const auto other = run(train_cmd(term, "optimizer.name=adamw train.max_steps=40"));
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("optimizer.name"), std::string::npos) << other.output;
}

// train.fp8 (FP8 GEMMs emulated in F32 on the CPU, as the casts and GEMMs of a GPU compute them): both recipes learn
// as bf16 does, and the log names what stays in bf16.
TEST_F(TrainLoop, Fp8TrainingFollowsTheBf16LossCurve) {
  const std::string fixed = "checkpoint: {every_steps: 0, keep_last: 1, resume: never}\n";
  // Every layer in FP8 (the default leaves the first and last in bf16: this model has two).
  const std::string common = "train.max_steps=30 train.precision=bf16-pure train.fp8_edge_layers=0 ";
  const std::map<std::string, std::string> runs = {{"bf16", ""},
                                                   {"tensorwise", "train.fp8=tensorwise"},
                                                   {"rowwise", "train.fp8=rowwise 'train.fp8_skip=[down_proj]'"}};
  std::map<std::string, std::string> outputs;
  std::map<std::string, double> final_loss = final_losses(runs, fixed, common, 30, 5, &outputs);  // the last 5 steps
  ASSERT_EQ(final_loss.size(), runs.size());
  EXPECT_NE(outputs["tensorwise"].find("train.fp8: tensorwise: 14 of 14 projections"), std::string::npos)
      << outputs["tensorwise"];
  EXPECT_NE(outputs["rowwise"].find("train.fp8: rowwise: 12 of 14 projections train with FP8 GEMMs; in bf16 by "
                                    "train.fp8_skip, train.fp8_min_features or a size not a multiple of 16: "
                                    "model.layers.0.mlp.down_proj, model.layers.1.mlp.down_proj\n"),
            std::string::npos)
      << outputs["rowwise"];
  const double start = losses(dir_ / "bf16").begin()->second;
  const double learned = start - final_loss["bf16"];
  ASSERT_GT(learned, 0.3) << "the bf16 run should learn in 30 steps";
  std::cerr << "losses from " << start << ": bf16 " << final_loss["bf16"] << ", tensorwise " << final_loss["tensorwise"]
            << ", rowwise " << final_loss["rowwise"] << "\n";
  for (const char* name : {"tensorwise", "rowwise"}) {
    EXPECT_LT(std::abs(final_loss[name] - final_loss["bf16"]), 0.1 * learned) << name;
  }
}

TEST_F(TrainLoop, Fp16TrainsWithDynamicLossScaling) {
  const auto config = write_config("fp16", "checkpoint: {every_steps: 0, keep_last: 1, resume: never}\n");
  const auto result = run(train_cmd(config, "train.precision=fp16 train.max_steps=30"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::ifstream in(dir_ / "fp16" / "metrics.jsonl");
  std::string line;
  std::vector<nlohmann::json> steps;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.at("event") == "train") steps.push_back(j);
  }
  ASSERT_EQ(steps.size(), 30u);
  for (const auto& s : steps) {
    const double scale = s.at("loss_scale").get<double>();
    EXPECT_GT(scale, 0.0);
    EXPECT_LE(scale, 65536.0);
    EXPECT_EQ(std::exp2(std::round(std::log2(scale))), scale) << "a power of two";
    // Every skip halves the scale and nothing grows it within 2000 clean steps.
    EXPECT_EQ(s.at("skipped_steps").get<int64_t>(), 16 - static_cast<int64_t>(std::log2(scale)));
  }
  EXPECT_LT(steps.back().at("loss").get<double>(), steps.front().at("loss").get<double>());
}

TEST_F(TrainLoop, BadConfigExitsWithUsageCodeBeforeTraining) {
  const auto config = write_config("bad");
  const auto result = run(train_cmd(config, "optimizer.weight_decy=0.1"));
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("did you mean optimizer.weight_decay"), std::string::npos) << result.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "bad" / "metrics.jsonl"));
}

// The same HF checkpoint and token rows trained by PyTorch + transformers (tests/train/ref/train_reference.py):
// AdamW, warmup + cosine, clipping and accumulation 2 give the same loss at every one of 20 steps.
TEST(TrainLoopReference, LossesMatchPyTorchOverTwentySteps) {
  TempDir dir("ft-loop-ref");
  const auto script = (source_dir() / "tests/train/ref/train_reference.py").string();
  const auto model = dir / "model";
  const auto data = dir / "tokens.bin";
  const auto made = run(shell_quote(python()) + " " + shell_quote(script) + " --make --model-dir " +
                        shell_quote(model.string()) + " --data " + shell_quote(data.string()));
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const auto ref = run(shell_quote(python()) + " " + shell_quote(script) + " --model-dir " +
                       shell_quote(model.string()) + " --data " + shell_quote(data.string()) + " 2>/dev/null");
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  const auto expected = nlohmann::json::parse(ref.output.substr(ref.output.rfind('[')));

  write_file(dir / "ref.yaml", "run: {output_dir: " + (dir / "run").string() +
                                   ", device: cpu, deterministic: true}\n"
                                   "model: {path: " +
                                   model.string() +
                                   "}\n"
                                   "data: {train: [{path: " +
                                   data.string() +
                                   ", format: pretokenized}], seq_len: 32, shuffle: false,\n"
                                   "       cache_dir: " +
                                   (dir / "cache").string() +
                                   "}\n"
                                   "train: {max_steps: 20, micro_batch_size: 2, grad_accum_steps: 2, grad_clip: 0.5}\n"
                                   "optimizer: {lr: 1.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1}\n"
                                   "scheduler: {type: cosine, warmup_steps: 4, min_lr_ratio: 0.1}\n"
                                   "checkpoint: {every_steps: 0, resume: never}\n"
                                   "logging: {every_steps: 1, progress: off}\n");
  const auto ours = run(train_cmd(dir / "ref.yaml"));
  ASSERT_EQ(ours.exit_code, 0) << ours.output;
  const auto actual = losses(dir / "run");
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const double want = expected[i].get<double>();
    EXPECT_NEAR(actual.at(static_cast<int64_t>(i) + 1), want, 1e-5 * want) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace ft::test
