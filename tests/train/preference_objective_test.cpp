// The preference objectives end to end against TRL 1.16's own trainers (tests/train/ref/dpo_train_ref.py): on a tiny
// Llama with a LoRA adapter whose B is nonzero (so the policy differs from its reference, the base with the adapter
// off), one batch of pairs gives TRL's tokens, loss, logged metrics and adapter gradients for DPO, robust DPO, IPO,
// SimPO and ORPO, on string and conversational records, padded and packed, through the chunked linear +
// cross-entropy and through the logits. `finetune train` with train.objective dpo then tracks DPOTrainer's full
// fine-tune step by step, resumes bit-exactly mid-epoch, and trains a LoRA adapter with an eval set of pairs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "config/loader.h"
#include "data/batch.h"
#include "data/preference_dataset.h"
#include "model/lora.h"
#include "model/pretrained.h"
#include "model/transformer.h"
#include "support/scratch_dir.h"
#include "tokenizer/tokenizer.h"
#include "train/build.h"
#include "train/preference_objective.h"
#include "train/train_support.h"

namespace ft::test {
namespace {

// The reference directory (model/, adapter/, pairs*.jsonl, step0.json, train_dpo.json), written once.
struct TrlReference {
  std::string skip, error;
  std::filesystem::path dir;
  nlohmann::json step0, train;
};

// Under CTest the fixture in tests/train/CMakeLists.txt has PreferenceObjectiveTrlReference.TrlRunsOnce write the
// directory $FT_DPO_REF ($FT_DPO_REF_WRITE set) and the other tests read it; run by hand, the first test that needs
// it runs the script into a scratch directory.
const TrlReference& trl() {
  static ScratchDir scratch("ft-dpo-ref");
  static const TrlReference ref = [] {
    TrlReference r;
    const char* shared = std::getenv("FT_DPO_REF");
    r.dir = shared ? std::filesystem::path(shared) : scratch.path() / "ref";
    if (!shared || std::getenv("FT_DPO_REF_WRITE")) {
      std::filesystem::remove_all(r.dir);
      const std::string script = (source_dir() / "tests/train/ref/dpo_train_ref.py").string();
      const auto result = run(shell_quote(python()) + " " + shell_quote(script) + " " + shell_quote(r.dir.string()));
      if (result.exit_code != 0) {
        r.error = "dpo_train_ref.py failed: " + result.output;
        return r;
      }
    }
    if (std::filesystem::exists(r.dir / "skip.json")) {
      r.skip = nlohmann::json::parse(read_file(r.dir / "skip.json")).at("skip").get<std::string>();
    } else if (!std::filesystem::exists(r.dir / "train_dpo.json")) {
      r.error = (r.dir / "train_dpo.json").string() +
                " is missing: PreferenceObjectiveTrlReference.TrlRunsOnce "
                "writes it";
    } else {
      r.step0 = nlohmann::json::parse(read_file(r.dir / "step0.json"));
      r.train = nlohmann::json::parse(read_file(r.dir / "train_dpo.json"));
    }
    return r;
  }();
  return ref;
}

// Skips without TRL, fails when its script failed; `ref` is the reference.
#define REQUIRE_TRL()                              \
  [[maybe_unused]] const auto& ref = trl();        \
  if (!ref.skip.empty()) GTEST_SKIP() << ref.skip; \
  ASSERT_TRUE(ref.error.empty()) << ref.error

// max |a - b| / max |b|.
double rel(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() /
         std::max(1e-12, b.to(at::kDouble).abs().max().item<double>());
}

at::Tensor nested(const nlohmann::json& j) {
  std::vector<double> flat;
  std::vector<int64_t> shape;
  const nlohmann::json* level = &j;
  while (level->is_array()) {
    shape.push_back(static_cast<int64_t>(level->size()));
    if (level->empty()) break;
    level = &(*level)[0];
  }
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& x) {
    if (x.is_array()) {
      for (const auto& e : x) walk(e);
    } else {
      flat.push_back(x.get<double>());
    }
  };
  walk(j);
  return at::tensor(flat, at::kDouble).reshape(shape);
}

// The config of a case: the reference's model and adapter settings, `objective` with TRL's hyper-parameters.
Config case_config(const std::filesystem::path& dir, const std::string& trl_case, const std::string& pairs_file) {
  const std::string kind = trl_case.rfind("chat_", 0) == 0 ? trl_case.substr(5) : trl_case;
  std::vector<std::string> overrides = {"model.path=" + (dir / "model").string(),
                                        "data.train=[{path: " + (dir / pairs_file).string() + ", format: preference}]",
                                        "data.seq_len=64", "data.on_error=skip",
                                        "run.output_dir=" + (dir / "unused").string()};
  if (kind == "dpo" || kind == "robust") overrides.push_back("train.objective=dpo");
  if (kind == "robust") overrides.insert(overrides.end(), {"preference.robust=true", "preference.label_smoothing=0.1"});
  if (kind == "ipo") overrides.push_back("train.objective=ipo");
  if (kind == "simpo") overrides.insert(overrides.end(), {"train.objective=simpo", "preference.beta=2.0"});
  if (kind == "orpo") overrides.insert(overrides.end(), {"train.objective=orpo", "preference.orpo_lambda=0.1"});
  const auto config = dir / ("case-" + trl_case + ".yaml");
  write_file(config, "run:\n  device: cpu\n");
  return config::load_config(config.string(), overrides).config;
}

struct CaseRun {
  at::Tensor loss;                        // the batch mean, as TRL's
  std::map<std::string, double> metrics;  // means over the pairs
  std::map<std::string, at::Tensor> grads;
  std::vector<const data::PreferencePair*> pairs;
};

// Our objective on the reference's first 4 pairs of `pairs_file` under `trl_case`'s settings: padded or packed,
// through the chunked linear + cross-entropy (`fused`) or the logits.
CaseRun run_case(const std::string& trl_case, const std::string& pairs_file, bool packed, bool fused,
                 std::shared_ptr<const data::PreferenceDataset>* keep) {
  const auto& dir = trl().dir;
  const Config cfg = case_config(dir, trl_case, pairs_file);
  const auto tok = train::build_tokenizer(cfg);
  const auto chat = data::preference_chat(cfg, *tok);
  *keep =
      data::PreferenceDataset::build(cfg.data.train, data::preference_options(cfg, chat.get()), OnError::kSkip, *tok);
  auto model = model::load_pretrained(dir / "model", at::kCPU, at::kFloat);
  model::load_adapter(*model, dir / "adapter");
  model::KernelPolicy kernels;
  kernels.fused = fused;  // on the CPU: only the chunked linear + cross-entropy (ATen) follows it
  model->set_kernel_policy(kernels);
  model->train();
  const train::PreferenceObjective objective(train::preference_loss_options(cfg), train::resolve_precision(cfg),
                                             kernels, nullptr);
  const data::Batch batch = (*keep)->collate({{0}, {1}, {2}, {3}}, {/*seq_len=*/0, packed, tok->pad_id()});
  metrics::MetricSums sums;
  CaseRun out;
  const at::Tensor loss_sum = objective.loss_sum(*model, batch, &sums);
  out.loss = loss_sum.detach() / 4;
  (loss_sum / 4).backward();
  for (const auto& [name, sum] : sums) out.metrics[name] = sum.item<double>() / 4;
  for (const auto& [name, t] : model::adapter_tensors(*model)) out.grads[name] = t.grad();
  for (int64_t i = 0; i < 4; ++i) out.pairs.push_back(&(*keep)->pair(i));
  return out;
}

// TRL's tokens of the batch: chosen rows 0..3, then rejected rows 0..3.
void expect_trl_tokens(const CaseRun& got, const nlohmann::json& sequences) {
  for (size_t row = 0; row < 8; ++row) {
    const auto& pair = *got.pairs[row % 4];
    const auto& seq = row < 4 ? pair.chosen : pair.rejected;
    const auto ids = sequences.at("input_ids")[row].get<std::vector<int64_t>>();
    const auto mask = sequences.at("completion_mask")[row].get<std::vector<int64_t>>();
    EXPECT_EQ(std::vector<int64_t>(seq.tokens.begin(), seq.tokens.end()), ids) << "row " << row;
    EXPECT_EQ(std::vector<int64_t>(seq.loss.begin(), seq.loss.end()), mask) << "row " << row;
  }
}

void expect_matches_trl(const std::string& trl_case) {
  const auto& expected = trl().step0.at(trl_case);
  const std::string pairs_file = trl_case.rfind("chat_", 0) == 0 ? "pairs_chat.jsonl" : "pairs.jsonl";
  for (const bool packed : {false, true}) {
    for (const bool fused : {false, true}) {
      SCOPED_TRACE(trl_case + (packed ? " packed" : " padded") + (fused ? " chunked" : " logits"));
      std::shared_ptr<const data::PreferenceDataset> data;
      const CaseRun got = run_case(trl_case, pairs_file, packed, fused, &data);
      expect_trl_tokens(got, expected.at("sequences"));
      EXPECT_NEAR(got.loss.item<double>(), expected.at("loss").get<double>(),
                  1e-5 * std::max(1.0, std::abs(expected.at("loss").get<double>())));
      for (const auto& [name, value] : got.metrics) {
        ASSERT_TRUE(expected.at("metrics").contains(name)) << name;
        const double want = expected.at("metrics").at(name).get<double>();
        EXPECT_NEAR(value, want, 1e-5 * std::max(1.0, std::abs(want))) << name;
      }
      ASSERT_EQ(got.grads.size(), expected.at("grads").size());
      for (const auto& [name, grad] : got.grads) {
        ASSERT_TRUE(expected.at("grads").contains(name)) << name;
        ASSERT_TRUE(grad.defined()) << name;
        EXPECT_LT(rel(grad, nested(expected.at("grads").at(name))), 1e-4) << name;
      }
    }
  }
}

// Under CTest, the fixture setup: TRL runs here, once for every test below.
TEST(PreferenceObjectiveTrlReference, TrlRunsOnce) {
  REQUIRE_TRL();
  EXPECT_TRUE(ref.step0.contains("dpo"));
}

TEST(PreferenceObjectiveMatchesTrl, DpoOnStringPairs) {
  REQUIRE_TRL();
  expect_matches_trl("dpo");
}

TEST(PreferenceObjectiveMatchesTrl, RobustDpoOnStringPairs) {
  REQUIRE_TRL();
  expect_matches_trl("robust");
}

TEST(PreferenceObjectiveMatchesTrl, IpoOnStringPairs) {
  REQUIRE_TRL();
  expect_matches_trl("ipo");
}

TEST(PreferenceObjectiveMatchesTrl, SimpoOnStringPairs) {
  REQUIRE_TRL();
  expect_matches_trl("simpo");
}

TEST(PreferenceObjectiveMatchesTrl, OrpoOnStringPairs) {
  REQUIRE_TRL();
  expect_matches_trl("orpo");
}

TEST(PreferenceObjectiveMatchesTrl, DpoOnConversations) {
  REQUIRE_TRL();
  expect_matches_trl("chat_dpo");
}

TEST(PreferenceObjectiveMatchesTrl, IpoOnConversations) {
  REQUIRE_TRL();
  expect_matches_trl("chat_ipo");
}

TEST(PreferenceObjectiveMatchesTrl, SimpoOnConversations) {
  REQUIRE_TRL();
  expect_matches_trl("chat_simpo");
}

TEST(PreferenceObjectiveMatchesTrl, OrpoOnConversations) {
  REQUIRE_TRL();
  expect_matches_trl("chat_orpo");
}

// metrics.jsonl's train events: step -> fields.
std::map<int64_t, nlohmann::json> train_events(const std::filesystem::path& run_dir) {
  std::map<int64_t, nlohmann::json> out;
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.at("event") == "train") out[j.at("step").get<int64_t>()] = j;
  }
  return out;
}

// A `finetune train` config over the reference's model and pairs, as train_dpo.json's DPOTrainer run: full
// fine-tune, fp32 on the CPU, 2 pairs per step in file order, AdamW lr 1e-4 constant, clipping at 1.
std::filesystem::path dpo_config(const std::filesystem::path& dir, const std::string& name, const std::string& extra) {
  const auto path = dir / (name + ".yaml");
  write_file(path, "run:\n  output_dir: " + (dir / name).string() +
                       "\n  device: cpu\n  seed: 0\nmodel:\n  path: " + (trl().dir / "model").string() +
                       "\ndata:\n  train:\n    - path: " + (trl().dir / "pairs.jsonl").string() +
                       "\n      format: preference\n  seq_len: 64\n  shuffle: false\n  cache_dir: " +
                       (dir / "cache").string() +
                       "\ntrain:\n  objective: dpo\n  micro_batch_size: 2\n  max_steps: 8\n  grad_clip: 1.0\n"
                       "preference:\n  beta: 0.1\noptimizer:\n  lr: 1.0e-4\n  weight_decay: 0.0\n"
                       "scheduler:\n  type: constant\nlogging:\n  every_steps: 1\n  progress: off\n" +
                       extra);
  return path;
}

// The 20 steps of train_dpo.json's DPOTrainer run: loss, rewards, log-probs and gradient norm at every step.
void expect_tracks_dpo_trainer(const std::filesystem::path& run_dir) {
  const auto events = train_events(run_dir);
  const auto& want = trl().train.at("metrics");
  ASSERT_EQ(events.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& got = events.at(static_cast<int64_t>(i + 1));
    SCOPED_TRACE("step " + std::to_string(i + 1));
    EXPECT_NEAR(got.at("loss").get<double>(), trl().train.at("losses")[i].get<double>(), 5e-6);
    for (const char* name : {"rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"}) {
      EXPECT_NEAR(got.at(name).get<double>(), want[i].at(name).get<double>(), 5e-6) << name;
    }
    for (const char* name : {"logps/chosen", "logps/rejected"}) {
      EXPECT_NEAR(got.at(name).get<double>(), want[i].at(name).get<double>(),
                  1e-5 * std::abs(want[i].at(name).get<double>()))
          << name;
    }
    EXPECT_NEAR(got.at("grad_norm").get<double>(), want[i].at("grad_norm").get<double>(),
                1e-4 * want[i].at("grad_norm").get<double>());
  }
}

TEST(PreferenceTraining, FullFineTuneDpoTracksDpoTrainerStepByStep) {
  REQUIRE_TRL();
  ScratchDir dir("ft-dpo-train");
  const auto result = run(train_cmd(dpo_config(dir.path(), "run", ""), "train.max_steps=20"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("frozen copy of the starting model"), std::string::npos) << result.output;
  expect_tracks_dpo_trainer(dir / "run");
}

// preference.precompute_ref_logps: the reference log-probs of every pair come from one pass before training, and no
// frozen copy is built; the run still tracks DPOTrainer (whose reference is a frozen copy) step by step.
TEST(PreferenceTraining, PrecomputedReferenceTracksDpoTrainerWithoutAFrozenCopy) {
  REQUIRE_TRL();
  ScratchDir dir("ft-dpo-precompute");
  const auto result =
      run(train_cmd(dpo_config(dir.path(), "run", ""), "train.max_steps=20 preference.precompute_ref_logps=true"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output.find("frozen copy"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("precomputed in"), std::string::npos) << result.output;
  expect_tracks_dpo_trainer(dir / "run");
}

TEST(PreferenceTraining, DpoResumesMidEpochWithTheSameLosses) {
  REQUIRE_TRL();
  ScratchDir dir("ft-dpo-resume");
  ASSERT_EQ(run(train_cmd(dpo_config(dir.path(), "straight", ""))).exit_code, 0);
  const auto config = dpo_config(dir.path(), "resumed", "checkpoint:\n  every_steps: 3\n");
  const auto first = run(train_cmd(config, "train.max_steps=3"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto second = run(train_cmd(config));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from"), std::string::npos) << second.output;
  expect_same_losses(losses(dir / "straight"), losses(dir / "resumed"), 0.0);
}

// The precomputed reference log-probs are kept in the run directory: a resumed run reads them instead of scoring
// the pairs again, and its losses equal an uninterrupted run's exactly.
// The values are kept beside the tokenized data (data.cache_dir): another run of the same model on the same pairs
// reads them (a sweep's trials), and so does a resumed run; a run whose key differs (another seed) scores anew.
TEST(PreferenceTraining, PrecomputedReferenceIsReadBackByOtherRunsAndOnResume) {
  REQUIRE_TRL();
  ScratchDir dir("ft-dpo-precompute-resume");
  const std::string precompute = " preference.precompute_ref_logps=true";
  const auto straight = run(train_cmd(dpo_config(dir.path(), "straight", ""), precompute));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  EXPECT_NE(straight.output.find("precomputed in"), std::string::npos) << straight.output;
  const auto config = dpo_config(dir.path(), "resumed", "checkpoint:\n  every_steps: 3\n");
  const auto first = run(train_cmd(config, "train.max_steps=3" + precompute));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("pairs read from"), std::string::npos) << first.output;
  EXPECT_EQ(first.output.find("precomputed in"), std::string::npos) << first.output;
  const auto reseeded =
      run(train_cmd(dpo_config(dir.path(), "reseeded", ""), "train.max_steps=1 run.seed=99" + precompute));
  ASSERT_EQ(reseeded.exit_code, 0) << reseeded.output;
  EXPECT_NE(reseeded.output.find("precomputed in"), std::string::npos) << reseeded.output;
  const auto second = run(train_cmd(config, precompute));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("pairs read from"), std::string::npos) << second.output;
  EXPECT_EQ(second.output.find("precomputed in"), std::string::npos) << second.output;
  expect_same_losses(losses(dir / "straight"), losses(dir / "resumed"), 0.0);
}

// The pairs of a step split over accumulation or over two Gloo ranks: the per-pair losses are averaged over the
// step's pairs whatever the split, so losses, rewards and the final weights equal one process's 2-pair batches. The
// same holds with the reference log-probs precomputed, the two ranks sharing that pass.
TEST(PreferenceTraining, DpoOverAccumulationAndTwoGlooRanksMatchesOneBatchOfPairs) {
  REQUIRE_TRL();
  ScratchDir dir("ft-dpo-ddp");
  const std::string fixed = "checkpoint:\n  every_steps: 0\n  resume: never\n";
  ASSERT_EQ(run(train_cmd(dpo_config(dir.path(), "one", fixed), "train.max_steps=6")).exit_code, 0);
  const auto accum = run(train_cmd(dpo_config(dir.path(), "accum", fixed),
                                   "train.max_steps=6 train.micro_batch_size=1 train.grad_accum_steps=2"));
  ASSERT_EQ(accum.exit_code, 0) << accum.output;
  const auto ranks = run(train_cmd(dpo_config(dir.path(), "ranks", fixed),
                                   "--nproc-per-node 2 train.max_steps=6 train.micro_batch_size=1"));
  ASSERT_EQ(ranks.exit_code, 0) << ranks.output;
  // Precomputed reference log-probs: the two ranks share the pass over the pairs (one pair per batch, alternating).
  const auto shared = run(train_cmd(dpo_config(dir.path(), "precomputed", fixed),
                                    "--nproc-per-node 2 train.max_steps=6 train.micro_batch_size=1 "
                                    "preference.precompute_ref_logps=true"));
  ASSERT_EQ(shared.exit_code, 0) << shared.output;
  const auto want = train_events(dir / "one");
  ASSERT_EQ(want.size(), 6u);
  for (const char* split : {"accum", "ranks", "precomputed"}) {
    SCOPED_TRACE(split);
    const auto got = train_events(dir / split);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [step, event] : want) {
      for (const char* name : {"loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "logps/chosen"}) {
        const double expected = event.at(name).get<double>();
        EXPECT_NEAR(got.at(step).at(name).get<double>(), expected, 1e-5 * std::max(1.0, std::abs(expected)))
            << name << " at step " << step;
      }
    }
    EXPECT_LE(max_weight_diff(dir / "one", dir / split), 1e-6);
  }
}

// LoRA: the reference is the base with the adapters off; conversational pairs train, an eval set of pairs reports
// TRL's metrics, and the adapter is saved for PEFT.
TEST(PreferenceTraining, LoraDpoOnConversationsEvaluatesPairsAndSavesTheAdapter) {
  REQUIRE_TRL();
  ScratchDir dir("ft-dpo-lora");
  const std::string chat = (ref.dir / "pairs_chat.jsonl").string();
  const auto config =
      dpo_config(dir.path(), "lora", "lora:\n  enabled: true\n  rank: 4\n  alpha: 8\n  targets: [all-linear]\n");
  const auto result =
      run(train_cmd(config, "'data.train=[{path: " + chat + ", format: preference}]' " + "'data.eval=[{path: " + chat +
                                ", format: preference}]' " + "train.max_steps=4 optimizer.lr=1e-3"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("the base with the adapters switched off"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("reward accuracy"), std::string::npos) << result.output;
  const auto events = train_events(dir / "lora");
  ASSERT_EQ(events.size(), 4u);
  // Step 1: the adapters start at B = 0, so the policy is its reference: loss log 2, rewards 0.
  EXPECT_NEAR(events.at(1).at("loss").get<double>(), std::log(2.0), 1e-6);
  EXPECT_EQ(events.at(1).at("rewards/margins").get<double>(), 0.0);
  EXPECT_NE(events.at(4).at("rewards/margins").get<double>(), 0.0);
  EXPECT_TRUE(std::filesystem::exists(dir / "lora/adapter/adapter_model.safetensors"));
  // The final evaluation over the pairs it trained on: the adapter prefers the chosen answers now.
  std::ifstream in(dir / "lora/metrics.jsonl");
  std::string line;
  std::optional<nlohmann::json> eval;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("event") == "eval") eval = j;
  }
  ASSERT_TRUE(eval.has_value());
  EXPECT_LT(eval->at("loss").get<double>(), std::log(2.0));
  EXPECT_GT(eval->at("rewards/margins").get<double>(), 0.0);
  EXPECT_TRUE(eval->contains("rewards/accuracies") && eval->contains("logps/chosen"));
}

// Under LoRA, precomputed reference log-probs equal the reference forward with the adapters off at every step, for
// the training pairs and the eval set alike.
TEST(PreferenceTraining, LoraDpoWithPrecomputedReferenceEqualsTheAdaptersOffForward) {
  REQUIRE_TRL();
  ScratchDir dir("ft-dpo-lora-precompute");
  const std::string chat = (ref.dir / "pairs_chat.jsonl").string();
  const std::string sets = "'data.train=[{path: " + chat + ", format: preference}]' " + "'data.eval=[{path: " + chat +
                           ", format: preference}]' train.max_steps=3 optimizer.lr=1e-3 eval.every_steps=2";
  const std::string lora = "lora:\n  enabled: true\n  rank: 4\n  alpha: 8\n  targets: [all-linear]\n";
  for (const char* name : {"forward", "precomputed"}) {
    const std::string extra = std::string(name) == "precomputed" ? " preference.precompute_ref_logps=true" : "";
    const auto result = run(train_cmd(dpo_config(dir.path(), name, lora), sets + extra));
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }
  std::map<std::string, std::vector<nlohmann::json>> events;  // run -> its train and eval events in order
  for (const char* name : {"forward", "precomputed"}) {
    std::ifstream in(dir / name / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j.at("event") == "train" || j.at("event") == "eval") events[name].push_back(j);
    }
  }
  const auto& want = events["forward"];
  const auto& got = events["precomputed"];
  ASSERT_EQ(got.size(), want.size());
  ASSERT_GE(want.size(), 5u);  // 3 steps, the eval at step 2 and the final one
  for (size_t i = 0; i < want.size(); ++i) {
    for (const char* name : {"loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/rejected"}) {
      const double expected = want[i].at(name).get<double>();
      EXPECT_NEAR(got[i].at(name).get<double>(), expected, 1e-6 * std::max(1.0, std::abs(expected)))
          << name << " of " << want[i].dump();
    }
  }
}

TEST(PreferenceTraining, DataInspectShowsEachPairsScoredIds) {
  REQUIRE_TRL();
  ScratchDir dir("ft-dpo-inspect");
  const auto result =
      run_finetune("data inspect --config " + shell_quote(dpo_config(dir.path(), "i", "").string()) + " --n 1");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("--- pair 0 chosen"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("--- pair 0 rejected"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("ids: "), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("[["), std::string::npos) << result.output;
}

}  // namespace
}  // namespace ft::test
