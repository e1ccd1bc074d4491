// The sweep file in-process: how grid, list and random combine, random draws, trial names, every kind of bad file
// (named by file, line and key), and the validation of all trial configs before anything runs.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "support/test_support.h"
#include "sweep/plan.h"
#include "sweep/runner.h"
#include "sweep/spec.h"
#include "util/error.h"

namespace ft::test {
namespace {
namespace fs = std::filesystem;

class SweepSpecTest : public ::testing::Test {
 protected:
  fs::path write(const std::string& text, const std::string& name = "sweep.yaml") {
    const auto path = dir_ / name;
    write_file(path, text);
    return path;
  }

  // The ConfigError message of reading `text` as a sweep file (and expanding it), or "" when it is fine.
  std::string error_of(const std::string& text) {
    try {
      sweep::expand(sweep::read_sweep_file(write(text)));
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }

  std::string values(const sweep::Trial& t) {
    std::string s;
    for (const auto& a : t.values) s += (s.empty() ? "" : " ") + a.key + "=" + a.yaml;
    return s;
  }

  TempDir dir_{"ft-sweep-spec"};
};

TEST_F(SweepSpecTest, GridListAndRandomMultiplyInDocumentedOrder) {
  const auto spec =
      sweep::read_sweep_file(write("grid:\n"
                                   "  optimizer.lr: [1.0e-3, 2.0e-3]\n"
                                   "  lora.rank: [4, 8]\n"
                                   "list:\n"
                                   "  - {lora.alpha: 8}\n"
                                   "  - {lora.alpha: 16, lora.dropout: 0.1}\n"
                                   "random:\n"
                                   "  samples: 3\n"
                                   "  seed: 7\n"
                                   "  params:\n"
                                   "    optimizer.weight_decay: {uniform: [0.0, 0.1]}\n"));
  const auto trials = sweep::expand(spec);
  ASSERT_EQ(trials.size(), 2u * 2u * 2u * 3u);
  EXPECT_EQ(spec.swept_keys, (std::vector<std::string>{"optimizer.lr", "lora.rank", "lora.alpha", "lora.dropout",
                                                       "optimizer.weight_decay"}));
  // The first grid key varies slowest, the random samples fastest.
  EXPECT_EQ(values(trials[0]).rfind("optimizer.lr=1.0e-3 lora.rank=4 lora.alpha=8 optimizer.weight_decay=", 0), 0u);
  EXPECT_EQ(values(trials[3]).rfind("optimizer.lr=1.0e-3 lora.rank=4 lora.alpha=16 lora.dropout=0.1 ", 0), 0u);
  EXPECT_EQ(values(trials[6]).rfind("optimizer.lr=1.0e-3 lora.rank=8 lora.alpha=8 ", 0), 0u);
  EXPECT_EQ(values(trials[12]).rfind("optimizer.lr=2.0e-3 lora.rank=4 lora.alpha=8 ", 0), 0u);
  // The same random samples for every grid point and list entry (a paired design).
  EXPECT_EQ(trials[0].values.back().yaml, trials[12].values.back().yaml);
  EXPECT_NE(trials[0].values.back().yaml, trials[1].values.back().yaml);
  std::set<std::string> names;
  for (const auto& t : trials) {
    EXPECT_EQ(t.index, static_cast<int>(names.size()));
    names.insert(t.name);
  }
  EXPECT_EQ(names.size(), trials.size());
  EXPECT_EQ(trials[3].name.rfind("lr1.0e-3-rank4-alpha16-dropout0.1-weight_decay", 0), 0u) << trials[3].name;
}

TEST_F(SweepSpecTest, RandomDrawsAreSeededWithinRangeAndLogUniform) {
  auto draw = [&](int seed) {
    return sweep::expand(
        sweep::read_sweep_file(write("random:\n"
                                     "  samples: 200\n"
                                     "  seed: " +
                                     std::to_string(seed) +
                                     "\n"
                                     "  params:\n"
                                     "    optimizer.lr: {log_uniform: [1.0e-5, 1.0e-1]}\n"
                                     "    lora.rank: {log_uniform: [2, 64]}\n"
                                     "    train.micro_batch_size: {uniform: [1, 3]}\n"
                                     "    lora.targets: {choice: [[q_proj], [q_proj, v_proj]]}\n")));
  };
  const auto a = draw(3), b = draw(3), c = draw(4);
  ASSERT_EQ(a.size(), 200u);
  int below_1e3 = 0;
  std::set<std::string> batch_sizes, targets;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(values(a[i]), values(b[i])) << "same seed, same draws";
    ASSERT_EQ(a[i].values.size(), 4u);
    const double lr = std::stod(a[i].values[0].yaml);
    EXPECT_GE(lr, 1e-5);
    EXPECT_LE(lr, 1e-1);
    EXPECT_EQ(a[i].values[0].yaml, fmt::format("{:.4g}", lr)) << "4 significant digits";
    if (lr < 1e-3) ++below_1e3;
    const int64_t rank = std::stoll(a[i].values[1].yaml);
    EXPECT_GE(rank, 2);
    EXPECT_LE(rank, 64);
    EXPECT_EQ(a[i].values[1].yaml, std::to_string(rank)) << "an integer key draws integers";
    batch_sizes.insert(a[i].values[2].yaml);
    targets.insert(a[i].values[3].yaml);
  }
  // Log-uniform over four decades: half the draws below the geometric middle 1e-3 (uniform would give ~1 %).
  EXPECT_GT(below_1e3, 70);
  EXPECT_LT(below_1e3, 130);
  EXPECT_EQ(batch_sizes, (std::set<std::string>{"1", "2", "3"}));
  EXPECT_EQ(targets, (std::set<std::string>{"[q_proj]", "[q_proj, v_proj]"}));
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) differs = differs || values(a[i]) != values(c[i]);
  EXPECT_TRUE(differs) << "another seed, other draws";
}

TEST_F(SweepSpecTest, NamesFromPatternsAreFileSystemSafe) {
  const auto trials =
      sweep::expand(sweep::read_sweep_file(write("name: \"lr${optimizer.lr}/r ${lora.rank}-#${index}\"\n"
                                                 "grid: {optimizer.lr: [1.0e-3, 3.0e-3], lora.rank: [4]}\n")));
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0].name, "lr1.0e-3_r_4-_0");
  EXPECT_EQ(trials[1].name, "lr3.0e-3_r_4-_1");
  EXPECT_EQ(sweep::safe_name("../../etc/passwd"), "etc_passwd");
  EXPECT_EQ(sweep::safe_name("a b\tc"), "a_b_c");
  EXPECT_EQ(sweep::safe_name(""), "trial");
  EXPECT_EQ(sweep::safe_name(std::string(300, 'x')).size(), 96u);
  // Derived names that collide once made safe get their index appended; quoted strings keep their quotes in the
  // override and not in the name.
  const auto derived = sweep::expand(sweep::read_sweep_file(write("grid: {data.system_prompt: [\"a/b\", \"a b\"]}\n")));
  ASSERT_EQ(derived.size(), 2u);
  EXPECT_EQ(derived[0].name, "system_prompta_b");
  EXPECT_EQ(derived[1].name, "system_prompta_b-1");
  EXPECT_EQ(derived[0].values[0].yaml, "\"a/b\"");
  // A list entry without keys is the base config.
  const auto base = sweep::expand(sweep::read_sweep_file(write("list:\n  - {}\n  - {optimizer.lr: 0.01}\n")));
  ASSERT_EQ(base.size(), 2u);
  EXPECT_EQ(base[0].name, "base");
  EXPECT_TRUE(base[0].values.empty());
  EXPECT_EQ(base[1].name, "lr0.01");
}

TEST_F(SweepSpecTest, RelativePathsAreRelativeToTheSweepFile) {
  const auto trials = sweep::expand(sweep::read_sweep_file(
      write("grid:\n  tokenizer.path: [tok/a.model]\n  data.train: [[{path: d/train.jsonl, format: text}]]\n")));
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0].values[0].yaml, (dir_ / "tok/a.model").string());
  EXPECT_EQ(trials[0].values[0].display, "tok/a.model");
  EXPECT_EQ(trials[0].values[1].yaml, "[{path: " + (dir_ / "d/train.jsonl").string() + ", format: text}]");
}

TEST_F(SweepSpecTest, BadFilesNameFileLineAndKey) {
  const std::string file = (dir_ / "sweep.yaml").string();
  struct Case {
    std::string text, expected;
  };
  const std::vector<Case> cases = {
      {"gird:\n  optimizer.lr: [1]\n", file + ":1:1: gird: unknown key; did you mean grid?"},
      {"grid:\n  optimizer.lrr: [1.0e-3]\n", file + ":2:3: grid.optimizer.lrr: unknown config key 'optimizer.lrr'; "
                                                    "did you mean optimizer.lr?"},
      {"grid:\n  optimizer.lr: []\n", file + ":2:17: grid.optimizer.lr: empty list"},
      {"grid: {}\n", file + ":1:7: grid: empty"},
      {"grid:\n", file + ":1:1: grid: empty"},
      {"grid:\n  train.max_steps: [10, ten]\n",
       file + ":2:25: grid.train.max_steps[1]: wrong type (expected an integer, got 'ten')"},
      {"grid:\n  optimizer.lr: 1.0e-3\n", file + ":2:17: grid.optimizer.lr: wrong type (expected a list of values"},
      {"grid:\n  optimizer: [1]\n", file + ":2:3: grid.optimizer: 'optimizer' is a section"},
      {"grid:\n  run.output_dir: [a, b]\n", file + ":2:3: grid.run.output_dir: set by the sweep"},
      {"set: {optimizer.lr: 1.0e-3}\ngrid: {optimizer.lr: [1.0e-3]}\n",
       file + ":2:8: grid.optimizer.lr: already given by set"},
      {"name: lr\ngrid:\n  optimizer.lr: [1.0e-3, 2.0e-3]\n",
       file + ":1:7: name: trials #0 (optimizer.lr=1.0e-3) and #1 (optimizer.lr=2.0e-3) both get the name 'lr'"},
      {"name: lr${optimizer.l}\ngrid:\n  optimizer.lr: [1.0e-3]\n",
       file + ":1:7: name: ${optimizer.l} is not a swept key"},
      {"grid:\n  optimizer.lr: [1.0e-3, 2.0e-3, 1.0e-3]\n",
       file + ":2:34: optimizer.lr: trial #2 has the same values as trial #0"},
      {"random:\n  samples: 2\n  params:\n    optimizer.lr: {loguniform: [1.0e-4, 1.0e-2]}\n",
       file + ":4:20: random.params.optimizer.lr.loguniform: unknown distribution; did you mean log_uniform?"},
      {"random:\n  samples: 2\n  params:\n    optimizer.lr: {log_uniform: [0, 1]}\n",
       file + ":4:33: random.params.optimizer.lr.log_uniform: log_uniform needs LOW > 0"},
      {"random:\n  samples: 2\n  params:\n    data.template: {uniform: [0, 1]}\n",
       file + ":4:21: random.params.data.template.uniform: a range needs a numeric key"},
      {"metric: eval.los\ngrid: {optimizer.lr: [1]}\n",
       file + ":1:9: metric: unknown metric 'eval.los'; did you mean eval.loss?"},
      {"mode: lowest\ngrid: {optimizer.lr: [1]}\n", file + ":1:7: mode: must be min or max"},
      {"max_parallel: -1\ngrid: {optimizer.lr: [1]}\n", file + ":1:15: max_parallel: must be at least 0"},
      {"median_stop: {min_trial: 2}\ngrid: {optimizer.lr: [1]}\n",
       file + ":1:15: median_stop.min_trial: unknown key; did you mean min_trials?"},
      {"metric: eval.loss\n", file + ": the sweep names no trials"},
      {"grid: [optimizer.lr\n", ": YAML syntax error"},
  };
  for (const auto& c : cases) {
    const std::string message = error_of(c.text);
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.text << "\n---\n" << message;
  }
  // Every problem of a file at once, in line order.
  const std::string several = error_of("gird: 1\ngrid:\n  optimizer.lrr: [1]\n  train.max_steps: [x]\n");
  EXPECT_NE(several.find("(3 errors)"), std::string::npos) << several;
  EXPECT_LT(several.find(":1:1: gird"), several.find(":3:3: grid.optimizer.lrr"));
  EXPECT_LT(several.find(":3:3: grid.optimizer.lrr"), several.find(":4:21: grid.train.max_steps[0]"));
}

TEST_F(SweepSpecTest, EveryTrialConfigIsValidatedBeforeAnythingRuns) {
  const auto base = write(
      "run: {device: cpu}\n"
      "data:\n"
      "  synth: {task: reverse, train_samples: 100, eval_samples: 10}\n"
      "  train: [{format: prompt_completion}]\n"
      "  eval: [{format: prompt_completion}]\n"
      "tokenizer: {train_vocab_size: 100}\n",
      "base.yaml");
  const auto sweep_file = write("grid:\n  optimizer.lr: [1.0e-3, -1]\n  train.micro_batch_size: [4, 0]\n");
  sweep::PlanOptions options;
  options.base_config = base;
  options.sweep_file = sweep_file;
  options.out_dir = (dir_ / "out").string();
  std::string message;
  try {
    sweep::make_plan(options);
  } catch (const ConfigError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("3 of 4 trial configs have errors"), std::string::npos) << message;
  EXPECT_EQ(message.find("trial lr1.0e-3-micro_batch_size4 "), std::string::npos) << message;
  EXPECT_NE(message.find("trial lr1.0e-3-micro_batch_size0 (#1):"), std::string::npos) << message;
  EXPECT_NE(message.find("trial lr-1-micro_batch_size4 (#2):"), std::string::npos) << message;
  EXPECT_NE(message.find("trial lr-1-micro_batch_size0 (#3):"), std::string::npos) << message;
  EXPECT_NE(message.find(sweep_file.string() + ":2:26 (optimizer.lr=-1): optimizer.lr:"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir_ / "out")) << "nothing is written before every trial is valid";

  // Overrides from the command line reach every trial, and may not fight the sweep over its keys.
  options.sweep_file = write("grid:\n  optimizer.lr: [1.0e-3, 2.0e-3]\n");
  options.overrides = {"train.max_steps=7"};
  const auto plan = sweep::make_plan(options);
  ASSERT_EQ(plan.trials.size(), 2u);
  EXPECT_EQ(plan.trials[1].loaded.config.train.max_steps, 7);
  EXPECT_EQ(plan.trials[1].loaded.config.optimizer.lr, 2e-3);
  EXPECT_EQ(plan.trials[1].loaded.config.run.output_dir, (dir_ / "out" / "lr2.0e-3").string());
  EXPECT_EQ(plan.trials[1].loaded.config.checkpoint.resume.mode, ResumeSetting::Mode::kAuto);
  options.overrides = {"optimizer.lr=1"};
  EXPECT_THROW(sweep::make_plan(options), ConfigError);
  // eval.* metrics need evaluation data in every trial.
  options.overrides = {"data.eval=[]"};
  try {
    sweep::make_plan(options);
    ADD_FAILURE() << "no error without eval data";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("metric: eval.loss needs evaluation data"), std::string::npos) << e.what();
  }
}

TEST(SweepDevices, GpusAreCutIntoDisjointSetsPerTrial) {
  using Sets = std::vector<std::vector<std::string>>;
  const std::vector<std::string> eight = {"0", "1", "2", "3", "4", "5", "6", "7"};
  EXPECT_EQ(sweep::device_slots(eight, 1, 0).size(), 8u);
  EXPECT_EQ(sweep::device_slots(eight, 2, 0), (Sets{{"0", "1"}, {"2", "3"}, {"4", "5"}, {"6", "7"}}));
  EXPECT_EQ(sweep::device_slots(eight, 3, 0), (Sets{{"0", "1", "2"}, {"3", "4", "5"}}));
  EXPECT_EQ(sweep::device_slots(eight, 2, 1), (Sets{{"0", "1"}}));
  EXPECT_THROW(sweep::device_slots(eight, 9, 0), ConfigError);
  // CUDA_VISIBLE_DEVICES entries are kept as given (ids or UUIDs); a value that disagrees with the count is ignored.
  const auto ids = sweep::visible_device_ids("4,6,GPU-1a2b", 3);
  EXPECT_EQ(ids, (std::vector<std::string>{"4", "6", "GPU-1a2b"}));
  EXPECT_EQ(sweep::device_slots(ids, 1, 0), (Sets{{"4"}, {"6"}, {"GPU-1a2b"}}));
  EXPECT_EQ(sweep::visible_device_ids("", 2), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(sweep::visible_device_ids("0,1,2", 2), (std::vector<std::string>{"0", "1"}));
}

TEST(SweepMedian, OfOddAndEvenCounts) {
  EXPECT_FALSE(sweep::median({}).has_value());
  EXPECT_EQ(*sweep::median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(*sweep::median({4.0, 1.0, 3.0, 2.0}), 2.5);
}

}  // namespace
}  // namespace ft::test
