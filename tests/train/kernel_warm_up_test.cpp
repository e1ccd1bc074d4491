// The kernel warm-up (train/kernel_warm_up.h): one forward, backward and optimizer step of a one-layer copy of the
// run's model, for every kind of layer, setting and optimizer, that leaves the run's generators as they were (the run's
// draws and losses must not depend on whether it ran). On the CPU the Trainer never starts it; these tests call it
// directly.
#include <gtest/gtest.h>

#include <string>

#include "model/args.h"
#include "model/kernel_policy.h"
#include "model/tiny_config.h"
#include "train/kernel_warm_up.h"
#include "train/precision.h"

namespace ft::test {
namespace {

struct WarmUpCase {
  std::string architecture;
  bool lora = false;
  bool packing = false;
  BaseQuantization quantize = BaseQuantization::kNone;
  OptimizerName optimizer = OptimizerName::kAdamW;
  bool loss_scaling = false;  // fp16's dynamic loss scaling (kept in F32 here: the CPU has no fp16 autocast GEMMs)
};

Config warm_up_config(const WarmUpCase& c) {
  Config cfg;
  cfg.model = tiny_model_config(c.architecture);
  cfg.model.quantize = c.quantize;
  cfg.model.activation_checkpointing = true;
  cfg.lora.enabled = c.lora;
  // Dropout would draw from the run's generator in train mode (adapters on experts take none).
  cfg.lora.dropout = c.architecture == "qwen3_moe" ? 0.0 : 0.1;
  cfg.lora.targets = {"all-linear"};
  cfg.data.packing = c.packing;
  cfg.run.seed = 7;
  cfg.optimizer.name = c.optimizer;
  // Tensors of 4,096 elements and more take 8-bit moments (optim::kEightBitMinNumel): the MLP's, 32 x 128.
  if (c.optimizer == OptimizerName::kAdamW8bit) cfg.model.intermediate_size = 128;
  return cfg;
}

class KernelWarmUpCases : public ::testing::TestWithParam<WarmUpCase> {};

TEST_P(KernelWarmUpCases, RunsTheLayerAndLeavesTheRunsGeneratorAsItWas) {
  const Config cfg = warm_up_config(GetParam());
  const model::ModelArgs args = model::args_from_config(cfg.model, cfg.model.vocab_size);
  train::PrecisionPolicy precision;
  precision.loss_scaling = GetParam().loss_scaling;
  const auto kernels = model::KernelPolicy::resolve(/*fused_kernels=*/true, at::kCPU, at::kFloat);

  at::manual_seed(123);
  train::warm_up_kernels(cfg, args, precision, kernels, train::WarmUpBatch{2, 16, GetParam().packing});
  const at::Tensor after = at::rand({8});
  at::manual_seed(123);
  EXPECT_TRUE(at::equal(after, at::rand({8})));
}

INSTANTIATE_TEST_SUITE_P(
    Layers, KernelWarmUpCases,
    ::testing::Values(WarmUpCase{"llama", /*lora=*/true, /*packing=*/true}, WarmUpCase{"llama"},
                      WarmUpCase{"qwen3_moe", /*lora=*/true}, WarmUpCase{"gemma2", /*lora=*/false, /*packing=*/true},
                      WarmUpCase{"phi3", /*lora=*/true},
                      WarmUpCase{"llama", /*lora=*/true, /*packing=*/false, BaseQuantization::kNf4},
                      WarmUpCase{"llama", /*lora=*/false, /*packing=*/false, BaseQuantization::kNone,
                                 OptimizerName::kAdamW8bit},
                      WarmUpCase{"llama", /*lora=*/true, /*packing=*/false, BaseQuantization::kNone,
                                 OptimizerName::kAdamW, /*loss_scaling=*/true}),
    [](const ::testing::TestParamInfo<WarmUpCase>& param_info) {
      return param_info.param.architecture + (param_info.param.lora ? "_lora" : "_full") +
             (param_info.param.packing ? "_packed" : "") +
             (param_info.param.quantize == BaseQuantization::kNf4 ? "_nf4" : "") +
             (param_info.param.optimizer == OptimizerName::kAdamW8bit ? "_adamw8bit" : "") +
             (param_info.param.loss_scaling ? "_loss_scaling" : "");
    });

}  // namespace
}  // namespace ft::test
