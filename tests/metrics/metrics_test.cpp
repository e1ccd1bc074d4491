// metrics.jsonl lines, progress text, and the MFU formula against published parameter counts.
#include <gtest/gtest.h>

#include <fstream>

#include "metrics/metrics.h"
#include "metrics/mfu.h"
#include "model/args.h"
#include "support/scratch_dir.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ft::test {
namespace {

TEST(MetricsLogger, WritesOneParseableObjectPerEventAndAppendsOnResume) {
  ScratchDir run;
  {
    metrics::MetricsLogger log(run.path(), {false, Progress::kOff, 10});
    log.log("train", 1, {{"loss", 2.5}, {"lr", 1e-4}, {"tokens_per_s", 1000.0}});
    log.log("train", 2, {{"loss", std::nan("")}});
    log.progress(2, {{"loss", 2.4}});
  }
  {
    metrics::MetricsLogger log(run.path(), {false, Progress::kOff, 10});
    log.log("eval", 3, {{"loss", 2.0}, {"perplexity", 7.389}});
  }
  std::ifstream in(run.path() / "metrics.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string s; std::getline(in, s);) lines.push_back(nlohmann::json::parse(s));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["event"], "train");
  EXPECT_EQ(lines[0]["step"], 1);
  EXPECT_EQ(lines[0]["loss"], 2.5);
  EXPECT_TRUE(lines[0]["time"].is_number());
  EXPECT_TRUE(lines[1]["loss"].is_null());  // NaN is not JSON
  EXPECT_EQ(lines[2]["event"], "eval");
  EXPECT_EQ(lines[2]["perplexity"], 7.389);
  // A bad logging.progress is refused where the config is loaded (tests/config/validate_test.cpp).
  EXPECT_FALSE(parse_setting<Progress>("sometimes").has_value());
}

TEST(MetricsLogger, ProgressTextHasStepLossThroughputAndEta) {
  const auto s = metrics::format_progress(12, 100, {{"loss", 2.34567}, {"tokens_per_s", 1234.4}, {"lr", 3e-4}}, 83.0);
  EXPECT_EQ(s, "step 12/100 | loss 2.3457 | lr 3.00e-04 | 1234 tok/s | ETA 1:23");
  EXPECT_EQ(metrics::format_duration(3725), "1:02:05");
  EXPECT_EQ(metrics::format_progress(3, 0, nlohmann::json::object(), -1), "step 3");
}

TEST(MetricsLogger, BarShowsTheFractionDoneAndTheTextTheElapsedTime) {
  EXPECT_EQ(metrics::format_progress(12, 100, {{"loss", 2.5}}, 83.0, 42.0),
            "step 12/100 | loss 2.5000 | 0:42 elapsed | ETA 1:23");
  EXPECT_EQ(metrics::format_bar(5, 20, 8), "[##......]  25%");
  EXPECT_EQ(metrics::format_bar(20, 20, 8), "[########] 100%");
  EXPECT_EQ(metrics::format_bar(3, 0, 4), "[....]   0%");  // no total known
}

// The bar's line fits the terminal (at most columns - 1 characters, so it never wraps): at 80 columns it keeps the
// step, loss, ETA and tokens/s; at 50 the step and the loss; a wide terminal shows every field.
TEST(MetricsLogger, StatusLineFitsTheTerminalKeepingTheFieldsThatMatterMost) {
  const nlohmann::json fields = {{"loss", 2.34567}, {"lr", 3e-4}, {"grad_norm", 0.5}, {"tokens_per_s", 123456.0}};
  const auto wide = metrics::format_status(300, 600, fields, 83.0, 4000.0, 200);
  EXPECT_EQ(wide,
            "[############............]  50% step 300/600 | loss 2.3457 | lr 3.00e-04 | gnorm 0.500 | 123456 tok/s "
            "| 1:06:40 elapsed | ETA 1:23");
  for (const int columns : {120, 100, 80, 60, 40, 30, 20, 10}) {
    const auto s = metrics::format_status(300, 600, fields, 83.0, 4000.0, columns);
    EXPECT_LE(s.size(), static_cast<size_t>(columns - 1)) << s;
    EXPECT_NE(s.find("step 300"), std::string::npos) << s;
    if (columns >= 50) {
      EXPECT_NE(s.find("loss 2.3457"), std::string::npos) << s;
    }
    if (columns >= 30) {
      EXPECT_EQ(s.rfind("[", 0), 0u) << s;
      EXPECT_NE(s.find("]  50% step 300/600"), std::string::npos) << s;
    }
  }
  const auto eighty = metrics::format_status(300, 600, fields, 83.0, 4000.0, 80);
  EXPECT_NE(eighty.find("ETA 1:23"), std::string::npos) << eighty;
  EXPECT_NE(eighty.find("123456 tok/s"), std::string::npos) << eighty;
  EXPECT_EQ(eighty.find("gnorm"), std::string::npos) << eighty;
  EXPECT_EQ(eighty.front(), '[');
}

TEST(Mfu, MatmulParamsOfLlama2_7bMatchPublishedCount) {
  // Llama-2-7B has 6,738,415,616 parameters; minus the input embedding (32000*4096) and the 65 RMSNorm
  // weights of 4096 leaves the matmul weights.
  metrics::FlopsModel m{32, 4096, 11008, 32000, 4096, 32, 32};
  EXPECT_EQ(metrics::matmul_params(m), 6738415616LL - 32000LL * 4096 - 65LL * 4096);
  EXPECT_DOUBLE_EQ(metrics::flops_per_token(m), 6.0 * metrics::matmul_params(m) + 12.0 * 32 * 4096 * 4096);
  // Llama-3-8B with GQA (8 KV heads): 8,030,261,248 parameters, 128256 vocab, untied head.
  metrics::FlopsModel l3{32, 4096, 14336, 128256, 8192, 32, 8};
  EXPECT_EQ(metrics::matmul_params(l3), 8030261248LL - 128256LL * 4096 - 65LL * 4096);
}

// Gemma-2-2B: head_dim 256 with 8 heads (2048) is not the hidden size 2304. 2,614,341,888 parameters, the
// embedding tied to the LM head (counted once, as the LM head's matmul), 4 norms per layer and a final one.
TEST(Mfu, HeadDimOtherThanHiddenOverHeadsSizesTheAttention) {
  metrics::FlopsModel m{26, 2304, 9216, 256000, 4096, 8, 4};
  m.head_dim = 256;
  EXPECT_EQ(metrics::matmul_params(m), 2614341888LL - 26LL * 4 * 2304 - 2304);
  EXPECT_DOUBLE_EQ(metrics::flops_per_token(m), 6.0 * metrics::matmul_params(m) + 12.0 * 26 * 2048 * 4096);
}

// Mixtral-8x7B: 46,702,792,704 parameters (32 layers, 8 experts of width 14336, a router of 8 outputs, GQA 32/8,
// vocab 32000, untied head). With all 8 experts counted the matmul weights are that less the embedding and the 65
// norms; a token runs through 2 of them, and MFU counts those (the active parameters).
TEST(Mfu, MixtureOfExpertsCountsTheExpertsATokenRunsThrough) {
  model::ModelArgs a;
  a.model_type = "mixtral";
  a.num_layers = 32;
  a.hidden_size = 4096;
  a.intermediate_size = 14336;
  a.vocab_size = 32000;
  a.num_heads = 32;
  a.num_kv_heads = 8;
  a.num_experts = 8;
  a.moe_intermediate_size = 14336;
  a.num_experts_per_tok = 8;
  EXPECT_EQ(metrics::matmul_params(metrics::FlopsModel::of(a, 4096)), 46702792704LL - 32000LL * 4096 - 65LL * 4096);
  a.num_experts_per_tok = 2;
  const int64_t attention = 2 * 4096LL * 4096 + 2 * 4096LL * 1024, experts = 2 * 3 * 4096LL * 14336;
  EXPECT_EQ(metrics::matmul_params(metrics::FlopsModel::of(a, 4096)),
            32 * (attention + experts + 4096LL * 8) + 32000LL * 4096);
  // Qwen3-MoE keeps the dense MLP in its mlp_only_layers.
  a.mlp_only_layers = {0, 1};
  const int64_t dense = 3 * 4096LL * 14336;
  EXPECT_EQ(metrics::matmul_params(metrics::FlopsModel::of(a, 4096)),
            32 * attention + 30 * (experts + 4096LL * 8) + 2 * dense + 32000LL * 4096);
}

TEST(Mfu, LoraCountsNoWeightGradientForTheFrozenBase) {
  // Llama-3-8B with r16 adapters on all 7 projections: 41,943,040 adapter parameters (PEFT's count).
  metrics::FlopsModel m{32, 4096, 14336, 128256, 2048, 32, 8};
  m.frozen_base = true;
  m.adapter_params = 41943040;
  const double n = static_cast<double>(metrics::matmul_params(m));
  EXPECT_DOUBLE_EQ(metrics::flops_per_token(m), 4.0 * n + 6.0 * 41943040 + 12.0 * 32 * 4096 * 2048);
}

TEST(Mfu, PeakTableAndConfiguredOverride) {
  EXPECT_EQ(metrics::peak_tflops("NVIDIA H200"), 989.0);
  EXPECT_EQ(metrics::peak_tflops("NVIDIA H100 80GB HBM3"), 989.0);
  EXPECT_EQ(metrics::peak_tflops("NVIDIA H100 PCIe"), 756.0);
  EXPECT_EQ(metrics::peak_tflops("NVIDIA A100-SXM4-80GB"), 312.0);
  EXPECT_EQ(metrics::peak_tflops("NVIDIA GH200 480GB"), 989.0);
  EXPECT_EQ(metrics::peak_tflops("NVIDIA L40S"), 362.0);
  EXPECT_EQ(metrics::peak_tflops("cpu"), 0.0);
  EXPECT_EQ(metrics::peak_tflops("NVIDIA H200", 500.0), 500.0);
  // 1000 tokens/s at 989 GFLOP per token is exactly one H200's 989 TFLOP/s; on two GPUs it is half.
  EXPECT_DOUBLE_EQ(metrics::mfu(1000.0, 989e9, 989.0, 1), 1.0);
  EXPECT_DOUBLE_EQ(metrics::mfu(1000.0, 989e9, 989.0, 2), 0.5);
  EXPECT_EQ(metrics::mfu(1000.0, 1e9, 0.0), 0.0);
}

}  // namespace
}  // namespace ft::test
