// The next-token objective: the summed loss over the labelled positions and its unit count, checked against the
// definition (minus the log-softmax of the logits at each label), with packed rows and ignored positions.
#include <gtest/gtest.h>

#include "data/batch.h"
#include "model/args.h"
#include "model/pretrained.h"
#include "model/tiny_config.h"
#include "model/transformer.h"
#include "train/objective.h"

namespace ft::test {
namespace {

data::Batch packed_batch() {
  data::Batch b;
  b.input_ids = at::tensor({3, 7, 11, 5, 9, 2, 40, 33, 1, 17}, at::kLong).view({2, 5});
  // Row 0: samples [3 7 11] and [5 9]; row 1: one sample, its first two targets ignored (a prompt).
  b.labels = at::tensor({7, 11, -100, 9, -100, -100, -100, 1, 17, -100}, at::kLong).view({2, 5});
  b.position_ids = at::tensor({0, 1, 2, 0, 1, 0, 1, 2, 3, 4}, at::kLong).view({2, 5});
  b.segment_ids = at::tensor({0, 0, 0, 1, 1, 0, 0, 0, 0, 0}, at::kInt).view({2, 5});
  b.cu_seqlens = at::tensor({0, 3, 5, 10}, at::kInt);
  b.max_seqlen = 5;
  b.num_target_tokens = 5;
  b.num_samples = 3;
  return b;
}

TEST(NextTokenObjective, SumsMinusLogProbabilityOfEveryLabelAndCountsTheLabels) {
  auto args = model::args_from_config(tiny_model_config("llama"), 0);
  auto model = std::make_shared<model::Transformer>(args);
  model::init_weights(*model, 0.2, 1);
  const auto batch = packed_batch();
  const train::PrecisionPolicy fp32;
  const train::NextTokenObjective objective(fp32,
                                            model::KernelPolicy::resolve(/*fused_kernels=*/true, at::kCPU, at::kFloat));
  EXPECT_EQ(objective.units(batch), 5);

  const at::Tensor loss = objective.loss_sum(*model, batch);
  ASSERT_EQ(loss.dim(), 0);
  EXPECT_TRUE(loss.requires_grad());

  at::NoGradGuard no_grad;
  const at::Tensor logp =  // F32 [B, T, V]
      at::log_softmax(model->forward(batch.input_ids, batch.position_ids, batch.segment_ids), -1);
  double expected = 0.0;
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t < 5; ++t) {
      const int64_t label = batch.labels[b][t].item<int64_t>();
      if (label != data::kIgnoreIndex) expected -= logp[b][t][label].item<double>();
    }
  }
  EXPECT_NEAR(loss.item<double>(), expected, 1e-4 * std::abs(expected));
}

}  // namespace
}  // namespace ft::test
