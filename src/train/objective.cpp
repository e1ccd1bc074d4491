#include "train/objective.h"

#include "data/batch.h"
#include "model/linear_cross_entropy.h"
#include "model/transformer.h"

namespace ft::train {

int64_t NextTokenObjective::units(const data::Batch& batch) const {
  return batch.num_target_tokens;
}

at::Tensor NextTokenObjective::loss_sum(model::Transformer& model, const data::Batch& batch) const {
  const c10::Device device = kernels_.device;
  const auto input_ids = batch.input_ids.to(device, /*non_blocking=*/true);
  const auto labels = batch.labels.to(device, /*non_blocking=*/true);
  const auto positions = batch.position_ids.to(device, /*non_blocking=*/true);
  const auto segments = batch.segment_ids.defined() ? batch.segment_ids.to(device, true) : at::Tensor();
  model::PackedPieces packed;
  if (batch.cu_seqlens.defined()) {
    packed.cu_seqlens = batch.cu_seqlens.to(device, /*non_blocking=*/true);
    packed.max_seqlen = batch.max_seqlen;
  }
  if (kernels_.fused) {
    at::Tensor hidden;  // [B, T, hidden]
    {
      const auto autocast = precision_.autocast_on(device.type());
      hidden = model.hidden_states(input_ids, positions, segments, nullptr, &packed);
    }
    return model::linear_cross_entropy_sum(hidden.reshape({-1, hidden.size(-1)}), model.lm_head_weight(),
                                           labels.reshape({-1}), precision_.compute, 0,
                                           model.args().final_logit_softcapping.value_or(0.0));
  }
  at::Tensor logits;  // [B, T, V] in the autocast dtype or the parameter dtype
  {
    const auto autocast = precision_.autocast_on(device.type());
    logits = model.forward(input_ids, positions, segments, nullptr, &packed);
  }
  const int64_t vocab = logits.size(-1);
  return at::cross_entropy_loss(logits.reshape({-1, vocab}).to(at::kFloat), labels.reshape({-1}), {},
                                at::Reduction::Sum, data::kIgnoreIndex);
}

std::unique_ptr<Objective> build_objective(const Config& /*cfg*/, const PrecisionPolicy& precision,
                                           const model::KernelPolicy& kernels) {
  return std::make_unique<NextTokenObjective>(precision, kernels);
}

}  // namespace ft::train
