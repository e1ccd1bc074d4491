// bf16 parity on a CUDA GPU against the transformers F32 references (skips without CUDA).
// Tolerance: bf16 keeps 8 mantissa bits, so bf16 logits are compared with the F32 reference relative to its
// range, and that error must stay within 2x of what transformers itself gets in bf16 (its bf16 logits are in the
// reference file) plus 0.5% of the range. F32 on the same GPU must stay within 1e-3 absolute.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "io/safetensors.h"
#include "model/generate.h"
#include "model/kernel_policy.h"
#include "model/pretrained.h"
#include "model/reference.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

class GpuParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  }
  std::filesystem::path dir() const { return reference_dir() / GetParam(); }
};

double rel_err(const at::Tensor& ours, const at::Tensor& ref) {
  return (ours.to(at::kFloat).cpu() - ref).abs().max().item<double>() / ref.abs().max().item<double>();
}

TEST_P(GpuParity, Bf16ParametersMatchTransformers) {
  const auto r = io::read_safetensors(dir() / "ref.safetensors");
  auto model = model::load_pretrained(dir() / "model", at::kCUDA, at::kBFloat16);
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(r.at("input_ids").to(at::kCUDA));
  EXPECT_EQ(logits.scalar_type(), at::kBFloat16);
  const double err = rel_err(logits, r.at("logits"));
  const double hf_err = rel_err(r.at("logits_bf16"), r.at("logits"));
  std::cout << GetParam() << " bf16 params: max abs err / max |logit| = " << err << " (transformers bf16: " << hf_err
            << ")\n";
  EXPECT_LT(err, 2.0 * hf_err + 0.005);
}

TEST_P(GpuParity, Bf16AutocastMatchesTransformers) {
  const auto r = io::read_safetensors(dir() / "ref.safetensors");
  auto model = model::load_pretrained(dir() / "model", at::kCUDA, at::kFloat);
  at::NoGradGuard no_grad;
  const at::Tensor f32 = model->forward(r.at("input_ids").to(at::kCUDA));
  EXPECT_LT((f32.cpu() - r.at("logits")).abs().max().item<double>(), 1e-3);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  const at::Tensor logits = model->forward(r.at("input_ids").to(at::kCUDA));
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  at::autocast::clear_cache();
  const double err = rel_err(logits, r.at("logits"));
  const double hf_err = rel_err(r.at("logits_bf16"), r.at("logits"));
  std::cout << GetParam() << " bf16 autocast: max abs err / max |logit| = " << err << " (transformers bf16 weights: "
            << hf_err << ")\n";
  EXPECT_LT(err, 2.0 * hf_err + 0.005);
}

// The training path of train.fused_kernels (grouped q/k/v and gate/up GEMMs, the RoPE and SwiGLU kernels, fused
// RMSNorm) under bf16 autocast: as close to transformers as the ATen path.
TEST_P(GpuParity, Bf16AutocastWithFusedKernelsMatchesTransformers) {
  const auto r = io::read_safetensors(dir() / "ref.safetensors");
  auto model = model::load_pretrained(dir() / "model", at::kCUDA, at::kFloat);
  model->set_kernel_policy(model::KernelPolicy::resolve(true, at::Device(at::kCUDA), at::kBFloat16));
  at::NoGradGuard no_grad;
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  const at::Tensor logits = model->forward(r.at("input_ids").to(at::kCUDA));
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  at::autocast::clear_cache();
  const double err = rel_err(logits, r.at("logits"));
  const double hf_err = rel_err(r.at("logits_bf16"), r.at("logits"));
  std::cout << GetParam() << " bf16 autocast, fused kernels: max abs err / max |logit| = " << err
            << " (transformers bf16 weights: " << hf_err << ")\n";
  EXPECT_LT(err, 2.0 * hf_err + 0.005);
}

// 32 greedy tokens of the model in F32 on the GPU, under `kernels` (undefined: the default policy, ATen's ops).
std::vector<int64_t> greedy_tokens(const std::filesystem::path& dir, const std::vector<int64_t>& prompt,
                                   const std::optional<model::KernelPolicy>& kernels) {
  auto model = model::load_pretrained(dir / "model", at::kCUDA, at::kFloat);
  if (kernels) model->set_kernel_policy(*kernels);
  model::GenerateOptions opts;
  opts.max_new_tokens = 32;
  return model::generate(*model, prompt, opts);
}

TEST_P(GpuParity, F32GreedyGenerationMatchesTransformers) {
  const auto j = nlohmann::json::parse(read_file(dir() / "ref.json"));
  EXPECT_EQ(greedy_tokens(dir(), j["prompt"].get<std::vector<int64_t>>(), std::nullopt),
            j["generated"].get<std::vector<int64_t>>());
}

// `finetune generate` sets the training policy (train.fused_kernels) on its model: F32 weights then take whichever
// fused paths accept F32 (flash attention and the grouped GEMMs do not) and must decode the same tokens.
TEST_P(GpuParity, F32GreedyGenerationWithFusedKernelsMatchesTransformers) {
  const auto j = nlohmann::json::parse(read_file(dir() / "ref.json"));
  EXPECT_EQ(greedy_tokens(dir(), j["prompt"].get<std::vector<int64_t>>(),
                          model::KernelPolicy::resolve(true, at::Device(at::kCUDA), at::kFloat)),
            j["generated"].get<std::vector<int64_t>>());
}

INSTANTIATE_TEST_SUITE_P(Families, GpuParity,
                         ::testing::Values("llama", "llama_yarn", "mistral", "qwen2", "qwen3", "qwen3_yarn", "phi3",
                                           "phi3_longrope", "gemma2", "gemma2_plain", "gemma3", "gemma3_full",
                                           "gemma3_bias", "qwen3_moe", "qwen3_moe_step", "mixtral"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace ft::test
