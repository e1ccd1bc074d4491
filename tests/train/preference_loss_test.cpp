// The DPO-family preference losses (train/preference_loss.h) against TRL's own code (trl==1.16.0, run by
// tests/train/ref/preference_ref.py on the same numbers): per-pair losses, the metrics TRL logs and the gradients
// w.r.t. the policy inputs, each pair alone and the batch together, in float64 (1e-6 relative) and float32. Plus the
// input checks and a hand-computed value, which need no Python.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/scratch_dir.h"
#include "support/test_support.h"
#include "train/preference_loss.h"
#include "util/error.h"

namespace ft::test {
namespace {

using train::PreferenceInputs;
using train::PreferenceLossKind;
using train::PreferenceLossOptions;
using train::PreferenceLossOutput;

// One pair's numbers, all exactly representable in float32 so that both precisions see the same inputs.
struct Pair {
  double policy_chosen, policy_rejected, ref_chosen, ref_rejected;
  int64_t chosen_tokens, rejected_tokens;
  double chosen_nll;
};

float f32(double x) {
  return static_cast<float>(x);
}

std::vector<Pair> make_pairs() {
  std::vector<Pair> pairs = {
      // Chosen and rejected alike: Δ = 0 for every kind.
      {-35.5, -35.5, -33.25, -33.25, 14, 14, 1.25},
      // Large margin for the chosen answer: DPO's loss underflows towards 0, IPO's grows large.
      {-4.0, -600.0, -150.0, -150.0, 20, 20, 0.5},
      // Large margin for the rejected answer.
      {-700.0, -2.0, -60.0, -60.0, 10, 5, 2.75},
      // Average log-prob near 0 (ORPO's log(-expm1) branch) and one-token completions.
      {f32(-0.002), f32(-1.5), f32(-0.01), f32(-1.25), 25, 1, f32(0.125)},
  };
  std::mt19937 rng(32);
  std::uniform_real_distribution<double> avg(-3.0, -0.05), shift(-2.0, 2.0), nll(0.5, 3.0);
  std::uniform_int_distribution<int64_t> count(1, 40);
  for (int i = 0; i < 4; ++i) {
    Pair p{};
    p.chosen_tokens = count(rng);
    p.rejected_tokens = count(rng);
    p.policy_chosen = f32(avg(rng) * static_cast<double>(p.chosen_tokens));
    p.policy_rejected = f32(avg(rng) * static_cast<double>(p.rejected_tokens));
    p.ref_chosen = f32(p.policy_chosen + shift(rng));
    p.ref_rejected = f32(p.policy_rejected + shift(rng));
    p.chosen_nll = f32(nll(rng));
    pairs.push_back(p);
  }
  return pairs;
}

PreferenceLossOptions options(PreferenceLossKind kind, double beta, double label_smoothing = 0.0,
                              double simpo_gamma = 0.5, double orpo_lambda = 0.1) {
  PreferenceLossOptions o;
  o.kind = kind;
  o.beta = beta;
  o.label_smoothing = label_smoothing;
  o.simpo_gamma = simpo_gamma;
  o.orpo_lambda = orpo_lambda;
  return o;
}

// A loss kind with its hyper-parameters, and how preference_ref.py names it.
struct Case {
  std::string trl_kind;
  PreferenceLossOptions options;
};

const std::map<std::string, Case>& cases() {
  static const std::map<std::string, Case> all = {
      {"sigmoid", {"sigmoid", options(PreferenceLossKind::kDpoSigmoid, 0.1)}},
      {"cdpo", {"cdpo", options(PreferenceLossKind::kDpoSigmoid, 0.3, 0.1)}},
      {"robust", {"robust", options(PreferenceLossKind::kDpoRobust, 0.2, 0.15)}},
      {"ipo", {"ipo", options(PreferenceLossKind::kIpo, 0.4)}},
      {"simpo", {"simpo", options(PreferenceLossKind::kSimpo, 2.0, 0.0, 0.8)}},
      {"simpo_smoothed", {"simpo", options(PreferenceLossKind::kSimpo, 2.5, 0.1, 1.0)}},
      {"orpo", {"orpo", options(PreferenceLossKind::kOrpo, 0.1, 0.0, 0.5, 0.25)}},
  };
  return all;
}

const char* dtype_name(at::ScalarType dtype) {
  return dtype == at::kDouble ? "float64" : "float32";
}

template <typename F>
nlohmann::json column(const std::vector<Pair>& pairs, F field) {
  nlohmann::json values = nlohmann::json::array();
  for (const auto& p : pairs) values.push_back(field(p));
  return values;
}

nlohmann::json case_json(const Case& c, at::ScalarType dtype, const std::vector<Pair>& pairs) {
  return {{"kind", c.trl_kind},
          {"dtype", dtype_name(dtype)},
          {"beta", c.options.beta},
          {"label_smoothing", c.options.label_smoothing},
          {"simpo_gamma", c.options.simpo_gamma},
          {"orpo_lambda", c.options.orpo_lambda},
          {"policy_chosen", column(pairs, [](const Pair& p) { return p.policy_chosen; })},
          {"policy_rejected", column(pairs, [](const Pair& p) { return p.policy_rejected; })},
          {"ref_chosen", column(pairs, [](const Pair& p) { return p.ref_chosen; })},
          {"ref_rejected", column(pairs, [](const Pair& p) { return p.ref_rejected; })},
          {"chosen_tokens", column(pairs, [](const Pair& p) { return p.chosen_tokens; })},
          {"rejected_tokens", column(pairs, [](const Pair& p) { return p.rejected_tokens; })},
          {"chosen_nll", column(pairs, [](const Pair& p) { return p.chosen_nll; })}};
}

std::string case_key(const std::string& name, at::ScalarType dtype) {
  return name + "/" + dtype_name(dtype);
}

// TRL's numbers for every case and both dtypes, from one run of preference_ref.py (importing TRL takes ~10 s).
struct TrlReference {
  std::string skip;   // why TRL is not available, or empty
  std::string error;  // why the script failed, or empty
  std::map<std::string, nlohmann::json> results;
};

// preference_ref.py's output for `input`, or {"error": why}.
nlohmann::json run_preference_ref(const nlohmann::json& input) {
  ScratchDir dir("ft-preference-ref");
  write_file(dir / "in.json", input.dump());
  const std::string script = (source_dir() / "tests" / "train" / "ref" / "preference_ref.py").string();
  const auto result = run(shell_quote(python()) + " " + shell_quote(script) + " " +
                          shell_quote((dir / "in.json").string()) + " " + shell_quote((dir / "out.json").string()));
  if (result.exit_code != 0) return {{"error", "preference_ref.py failed: " + result.output}};
  return nlohmann::json::parse(read_file(dir / "out.json"));
}

// CTest runs each test in a process of its own, so that one run of TRL is shared through a file: the fixture set up
// in tests/train/CMakeLists.txt has PreferenceLossTrlReference.TrlRunsOnceForEveryCase run the script and write its
// input and output to $FT_PREFERENCE_REF ($FT_PREFERENCE_REF_WRITE set), and the PreferenceLossMatchesTrl tests,
// which CTest starts only after it, read that file. Without the variable (the binary run by hand, one process) the
// first test that needs the numbers runs the script.
const TrlReference& trl() {
  static const TrlReference ref = [] {
    TrlReference r;
    const auto pairs = make_pairs();
    nlohmann::json input = {{"cases", nlohmann::json::array()}};
    std::vector<std::string> keys;
    for (const auto& [name, c] : cases()) {
      for (const auto dtype : {at::kFloat, at::kDouble}) {
        input["cases"].push_back(case_json(c, dtype, pairs));
        keys.push_back(case_key(name, dtype));
      }
    }
    const char* shared_env = std::getenv("FT_PREFERENCE_REF");
    const std::filesystem::path shared = shared_env ? shared_env : "";
    nlohmann::json out;
    if (!shared.empty() && !std::getenv("FT_PREFERENCE_REF_WRITE")) {
      if (!std::filesystem::exists(shared)) {
        r.error = shared.string() + " is missing: PreferenceLossTrlReference.TrlRunsOnceForEveryCase writes it";
        return r;
      }
      const auto saved = nlohmann::json::parse(read_file(shared));
      if (saved.at("input") != input) {
        r.error = shared.string() + " holds TRL's numbers for other inputs than this binary's";
        return r;
      }
      out = saved.at("output");
    } else {
      if (!shared.empty()) std::filesystem::remove(shared);  // no numbers of an earlier run if this one fails
      out = run_preference_ref(input);
      if (!shared.empty()) write_file(shared, nlohmann::json{{"input", input}, {"output", out}}.dump());
    }
    if (out.contains("error")) {
      r.error = out["error"].get<std::string>();
    } else if (out.contains("skip")) {
      r.skip = out["skip"].get<std::string>();
    } else {
      for (size_t i = 0; i < keys.size(); ++i) r.results[keys[i]] = out["cases"][i];
    }
    return r;
  }();
  return ref;
}

at::Tensor values(const std::vector<Pair>& pairs, double Pair::*field, at::ScalarType dtype, bool grad) {
  std::vector<double> v;
  for (const auto& p : pairs) v.push_back(p.*field);
  return at::tensor(v, at::kDouble).to(dtype).requires_grad_(grad);
}

at::Tensor counts(const std::vector<Pair>& pairs, int64_t Pair::*field) {
  std::vector<int64_t> v;
  for (const auto& p : pairs) v.push_back(p.*field);
  return at::tensor(v, at::kLong);
}

PreferenceInputs inputs(const std::vector<Pair>& pairs, at::ScalarType dtype) {
  PreferenceInputs in;
  in.policy_chosen_logps = values(pairs, &Pair::policy_chosen, dtype, true);
  in.policy_rejected_logps = values(pairs, &Pair::policy_rejected, dtype, true);
  in.ref_chosen_logps = values(pairs, &Pair::ref_chosen, dtype, false);
  in.ref_rejected_logps = values(pairs, &Pair::ref_rejected, dtype, false);
  in.chosen_tokens = counts(pairs, &Pair::chosen_tokens);
  in.rejected_tokens = counts(pairs, &Pair::rejected_tokens);
  in.chosen_nll = values(pairs, &Pair::chosen_nll, dtype, true);
  return in;
}

std::vector<double> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kDouble).contiguous().reshape({-1});
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

// Float64 runs the same expressions as TRL, so 1e-6 relative is loose; float32 allows a few ulps for the order of
// the batch reductions (ORPO's mean(nll - λ·r) against TRL's nll - mean(λ·r)).
void expect_close(const std::vector<double>& ours, const nlohmann::json& theirs, at::ScalarType dtype,
                  const std::string& what) {
  const std::vector<double> ref =
      theirs.is_array() ? theirs.get<std::vector<double>>() : std::vector<double>{theirs.get<double>()};
  ASSERT_EQ(ours.size(), ref.size()) << what;
  const double rtol = dtype == at::kDouble ? 1e-6 : 1e-5;
  for (size_t i = 0; i < ours.size(); ++i) {
    const double scale = std::max(std::abs(ours[i]), std::abs(ref[i]));
    EXPECT_LE(std::abs(ours[i] - ref[i]), rtol * scale)
        << what << "[" << i << "]: ours " << ours[i] << ", TRL " << ref[i];
  }
}

// Our per-pair value of a metric TRL logs; undefined for the ones that do not come from this math.
at::Tensor metric(const std::string& name, const PreferenceLossOutput& out, const PreferenceInputs& in) {
  if (name == "rewards/chosen") return out.chosen_rewards;
  if (name == "rewards/rejected") return out.rejected_rewards;
  if (name == "rewards/margins") return out.chosen_rewards - out.rejected_rewards;
  if (name == "rewards/accuracies") return (out.chosen_rewards > out.rejected_rewards).to(out.chosen_rewards.dtype());
  if (name == "logps/chosen") return out.chosen_logps;
  if (name == "logps/rejected") return out.rejected_logps;
  if (name == "log_odds_ratio") return out.log_odds_ratio;
  if (name == "log_odds_chosen") return out.log_odds;
  if (name == "nll_loss") return in.chosen_nll.detach();
  return {};
}

// Metrics TRL logs from the logits or the token counts of the batch, not from the per-sequence math.
const std::set<std::string> kNotOurs = {"entropy", "num_tokens", "logits/chosen", "logits/rejected",
                                        "mean_token_accuracy"};

void expect_metrics(const nlohmann::json& trl_metrics, const PreferenceLossOutput& out, const PreferenceInputs& in,
                    bool batch, at::ScalarType dtype, const std::string& where) {
  for (const auto& [name, value] : trl_metrics.items()) {
    if (kNotOurs.count(name)) continue;
    // SimPO's nll_loss is CPO's behaviour-cloning term, 0 with cpo_alpha = 0: not an input of ours.
    if (name == "nll_loss" && !out.log_odds.defined()) continue;
    at::Tensor ours = metric(name, out, in);
    ASSERT_TRUE(ours.defined()) << where << ": TRL logs " << name << ", which has no counterpart here";
    if (batch) ours = ours.mean();
    expect_close(to_vector(ours), value, dtype, where + " " + name);
  }
}

// Ours against TRL for one case in one dtype: each pair alone (losses, metrics, gradients of the sum of the losses,
// since each loss depends only on its own pair) and the batch (the mean loss, mean metrics and their gradients).
void expect_matches_trl(const std::string& name, at::ScalarType dtype) {
  const Case& c = cases().at(name);
  const auto& theirs = trl().results.at(case_key(name, dtype));
  const bool orpo = c.options.kind == PreferenceLossKind::kOrpo;
  const auto pairs = make_pairs();
  const std::string where = case_key(name, dtype);

  for (const bool batch : {false, true}) {
    const auto& expected = theirs[batch ? "batch" : "per_pair"];
    const std::string at = where + (batch ? " batch" : " per pair");
    const PreferenceInputs in = inputs(pairs, dtype);
    const PreferenceLossOutput out = train::preference_loss(in, c.options);
    ASSERT_EQ(out.losses.scalar_type(), dtype);
    const at::Tensor loss = batch ? out.losses.mean() : out.losses;
    expect_close(to_vector(loss), expected["loss"], dtype, at + " loss");
    expect_metrics(expected["metrics"], out, in, batch, dtype, at);
    (batch ? loss : loss.sum()).backward();
    expect_close(to_vector(in.policy_chosen_logps.grad()), expected["grads"]["policy_chosen"], dtype,
                 at + " d/d policy_chosen");
    expect_close(to_vector(in.policy_rejected_logps.grad()), expected["grads"]["policy_rejected"], dtype,
                 at + " d/d policy_rejected");
    if (orpo) {
      expect_close(to_vector(in.chosen_nll.grad()), expected["grads"]["chosen_nll"], dtype, at + " d/d chosen_nll");
    }
  }
}

// Both precisions in one test.
void expect_matches_trl(const std::string& name) {
  const auto& ref = trl();
  if (!ref.skip.empty()) GTEST_SKIP() << ref.skip;
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  for (const auto dtype : {at::kDouble, at::kFloat}) expect_matches_trl(name, dtype);
}

// Under CTest, the fixture setup of the PreferenceLossMatchesTrl tests: TRL runs here, once for all of them (trl()).
TEST(PreferenceLossTrlReference, TrlRunsOnceForEveryCase) {
  const auto& ref = trl();
  if (!ref.skip.empty()) GTEST_SKIP() << ref.skip;
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  EXPECT_EQ(ref.results.size(), 2 * cases().size());
}

TEST(PreferenceLossMatchesTrl, DpoSigmoidEqualsDpoTrainerSigmoid) {
  expect_matches_trl("sigmoid");
}

TEST(PreferenceLossMatchesTrl, DpoSigmoidWithLabelSmoothingIsConservativeDpo) {
  expect_matches_trl("cdpo");
}

TEST(PreferenceLossMatchesTrl, RobustDpoEqualsDpoTrainerRobust) {
  expect_matches_trl("robust");
}

TEST(PreferenceLossMatchesTrl, IpoEqualsDpoTrainerIpoWithLengthNormalisedLogRatios) {
  expect_matches_trl("ipo");
}

TEST(PreferenceLossMatchesTrl, SimpoEqualsCpoTrainerSimpo) {
  expect_matches_trl("simpo");
}

TEST(PreferenceLossMatchesTrl, SimpoWithLabelSmoothingEqualsCpoTrainerSimpo) {
  expect_matches_trl("simpo_smoothed");
}

TEST(PreferenceLossMatchesTrl, OrpoEqualsOrpoTrainerNllMinusLambdaTimesOddsRatioTerm) {
  expect_matches_trl("orpo");
}

// No Python below.

TEST(PreferenceLoss, DpoOfIdenticalChosenAndRejectedIsLog2WithGradientHalfBeta) {
  const std::vector<Pair> pairs = {{-12.0, -12.0, -11.0, -11.0, 4, 4, 1.0}};
  const PreferenceInputs in = inputs(pairs, at::kDouble);
  const auto out = train::preference_loss(in, options(PreferenceLossKind::kDpoSigmoid, 0.5));
  out.losses.sum().backward();
  EXPECT_DOUBLE_EQ(out.losses.item<double>(), std::log(2.0));
  EXPECT_DOUBLE_EQ(in.policy_chosen_logps.grad().item<double>(), -0.25);
  EXPECT_DOUBLE_EQ(in.policy_rejected_logps.grad().item<double>(), 0.25);
  EXPECT_DOUBLE_EQ(out.chosen_rewards.item<double>(), -0.5);
}

TEST(PreferenceLoss, LossesCarryAutogradAndLoggedValuesAreDetached) {
  for (const auto& [name, c] : cases()) {
    const auto out = train::preference_loss(inputs(make_pairs(), at::kFloat), c.options);
    EXPECT_TRUE(out.losses.requires_grad()) << name;
    EXPECT_EQ(out.losses.sizes(), at::IntArrayRef({8})) << name;
    for (const auto& t : {out.chosen_rewards, out.rejected_rewards, out.chosen_logps, out.rejected_logps}) {
      EXPECT_FALSE(t.requires_grad()) << name;
    }
    EXPECT_EQ(out.log_odds.defined(), c.options.kind == PreferenceLossKind::kOrpo) << name;
  }
}

TEST(PreferenceLoss, SimpoAndOrpoNeedNoReferenceModel) {
  PreferenceInputs in = inputs(make_pairs(), at::kFloat);
  in.ref_chosen_logps = in.ref_rejected_logps = at::Tensor();
  EXPECT_NO_THROW(train::preference_loss(in, cases().at("simpo").options));
  EXPECT_NO_THROW(train::preference_loss(in, cases().at("orpo").options));
  EXPECT_THROW(train::preference_loss(in, cases().at("sigmoid").options), Error);
  EXPECT_THROW(train::preference_loss(in, cases().at("ipo").options), Error);
}

TEST(PreferenceLoss, RejectsMissingTokenCountsOrNllWhereTheKindNeedsThem) {
  PreferenceInputs in = inputs(make_pairs(), at::kFloat);
  in.chosen_tokens = at::Tensor();
  EXPECT_NO_THROW(train::preference_loss(in, cases().at("sigmoid").options));
  EXPECT_THROW(train::preference_loss(in, cases().at("ipo").options), Error);
  EXPECT_THROW(train::preference_loss(in, cases().at("simpo").options), Error);
  in = inputs(make_pairs(), at::kFloat);
  in.chosen_nll = at::Tensor();
  EXPECT_THROW(train::preference_loss(in, cases().at("orpo").options), Error);
}

TEST(PreferenceLoss, RejectsInputsOfAnotherShapeOrDtype) {
  const auto pairs = make_pairs();
  PreferenceInputs in = inputs(pairs, at::kFloat);
  in.policy_rejected_logps = in.policy_rejected_logps.detach().slice(0, 0, 3);
  EXPECT_THROW(train::preference_loss(in, cases().at("sigmoid").options), Error);
  in = inputs(pairs, at::kFloat);
  in.ref_chosen_logps = in.ref_chosen_logps.view({2, 4});
  EXPECT_THROW(train::preference_loss(in, cases().at("sigmoid").options), Error);
  in = inputs(pairs, at::kFloat);
  in.ref_rejected_logps = in.ref_rejected_logps.to(at::kDouble);
  EXPECT_THROW(train::preference_loss(in, cases().at("sigmoid").options), Error);
  in = inputs(pairs, at::kFloat);
  in.policy_chosen_logps = in.policy_chosen_logps.detach().to(at::kBFloat16);
  EXPECT_THROW(train::preference_loss(in, cases().at("sigmoid").options), Error);
}

TEST(PreferenceLoss, RejectsOutOfRangeOptions) {
  const PreferenceInputs in = inputs(make_pairs(), at::kFloat);
  // IPO and ORPO have no label smoothing (TRL ignores it silently).
  EXPECT_THROW(train::preference_loss(in, options(PreferenceLossKind::kIpo, 0.1, 0.1)), Error);
  EXPECT_THROW(train::preference_loss(in, options(PreferenceLossKind::kOrpo, 0.1, 0.1)), Error);
  // Robust DPO divides by 1 - 2ε.
  EXPECT_THROW(train::preference_loss(in, options(PreferenceLossKind::kDpoRobust, 0.1, 0.5)), Error);
  EXPECT_THROW(train::preference_loss(in, options(PreferenceLossKind::kDpoSigmoid, 0.1, -0.1)), Error);
  EXPECT_THROW(train::preference_loss(in, options(PreferenceLossKind::kDpoSigmoid, 0.0)), Error);
  EXPECT_THROW(train::preference_loss(in, options(PreferenceLossKind::kOrpo, 0.1, 0.0, 0.5, -1.0)), Error);
  // ORPO does not read beta.
  EXPECT_NO_THROW(train::preference_loss(in, options(PreferenceLossKind::kOrpo, 0.0, 0.0, 0.5, 0.2)));
}

}  // namespace
}  // namespace ft::test
