// train.precision, model.dtype and distributed.reduce_dtype resolved to the dtypes the trainer uses (the one place
// that reads them: train/precision.h).
#include <gtest/gtest.h>

#include "train/precision.h"

namespace ft::test {
namespace {

train::PrecisionPolicy policy(const std::string& precision, const std::string& model_dtype = "fp32",
                              const std::string& reduce = "fp32") {
  Config cfg;
  cfg.train.precision = parse_setting<Precision>(precision).value();
  cfg.model.dtype = parse_setting<ModelDType>(model_dtype).value();
  cfg.distributed.reduce_dtype = parse_setting<ReduceDType>(reduce).value();
  return train::resolve_precision(cfg);
}

TEST(Precision, EachSettingResolvesToItsParameterComputeAndScalingDtypes) {
  const auto fp32 = policy("fp32");
  EXPECT_EQ(fp32.param, at::kFloat);
  EXPECT_FALSE(fp32.autocast);
  EXPECT_EQ(fp32.compute, at::kFloat);
  EXPECT_FALSE(fp32.loss_scaling);

  const auto bf16 = policy("bf16");  // autocast over F32 master weights
  EXPECT_EQ(bf16.param, at::kFloat);
  EXPECT_TRUE(bf16.autocast);
  EXPECT_EQ(bf16.autocast_dtype, at::kBFloat16);
  EXPECT_EQ(bf16.compute, at::kBFloat16);
  EXPECT_FALSE(bf16.loss_scaling);

  const auto fp16 = policy("fp16");
  EXPECT_EQ(fp16.autocast_dtype, at::kHalf);
  EXPECT_EQ(fp16.compute, at::kHalf);
  EXPECT_TRUE(fp16.loss_scaling);

  const auto pure = policy("bf16-pure");
  EXPECT_EQ(pure.param, at::kBFloat16);
  EXPECT_FALSE(pure.autocast);
  EXPECT_EQ(pure.compute, at::kBFloat16);

  // A bf16 (LoRA) base under bf16 autocast; bf16 gradients on the wire.
  const auto lora = policy("bf16", "bf16", "bf16");
  EXPECT_EQ(lora.param, at::kBFloat16);
  EXPECT_EQ(lora.compute, at::kBFloat16);
  EXPECT_EQ(lora.reduce, at::kBFloat16);
  EXPECT_EQ(policy("fp32", "bf16").compute, at::kBFloat16);  // no autocast: the parameters' dtype
  EXPECT_EQ(bf16.describe(), "Float parameters, BFloat16 compute (autocast), Float gradient reduction");
}

// model.quantize: fp8 and train.fp8 run only where their FP8 GEMMs run: FP8 tensor cores, BF16 compute, our kernels.
TEST(Fp8BaseRefusal, NamesWhatKeepsTheFp8GemmsFromRunning) {
  train::PrecisionPolicy bf16;
  bf16.compute = at::kBFloat16;
  EXPECT_EQ(train::fp8_gemm_refusal("model.quantize: fp8", bf16, 90, true), "");
  EXPECT_EQ(train::fp8_gemm_refusal("model.quantize: fp8", bf16, 89, true), "") << "Ada has FP8 tensor cores";
  EXPECT_NE(train::fp8_gemm_refusal("model.quantize: fp8", bf16, 80, true).find("compute capability 8.9 or later"),
            std::string::npos);
  EXPECT_NE(train::fp8_gemm_refusal("model.quantize: fp8", bf16, 80, true).find("has 8.0"), std::string::npos);
  train::PrecisionPolicy fp16 = bf16;
  fp16.compute = at::kHalf;
  EXPECT_NE(train::fp8_gemm_refusal("model.quantize: fp8", fp16, 90, true).find("computes in Half"), std::string::npos);
  EXPECT_NE(train::fp8_gemm_refusal("model.quantize: fp8", bf16, 90, false).find("train.fused_kernels"),
            std::string::npos);
  EXPECT_EQ(train::fp8_gemm_refusal("train.fp8: rowwise", bf16, 80, true).rfind("train.fp8: rowwise needs", 0), 0u);
}

}  // namespace
}  // namespace ft::test
