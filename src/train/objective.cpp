#include "train/objective.h"

#include "data/batch.h"
#include "model/linear_cross_entropy.h"
#include "model/transformer.h"
#include "train/preference_objective.h"
#include "train/router_aux_loss.h"

namespace ft::train {

DeviceBatch DeviceBatch::of(const data::Batch& batch, c10::Device device) {
  DeviceBatch d;
  d.input_ids = batch.input_ids.to(device, /*non_blocking=*/true);
  d.positions = batch.position_ids.to(device, /*non_blocking=*/true);
  if (batch.segment_ids.defined()) d.segments = batch.segment_ids.to(device, /*non_blocking=*/true);
  if (batch.cu_seqlens.defined()) {
    d.packed.cu_seqlens = batch.cu_seqlens.to(device, /*non_blocking=*/true);
    d.packed.max_seqlen = batch.max_seqlen;
  }
  return d;
}

namespace {

// The final hidden states [B, T, hidden] (fused) or the logits [B, T, V] under the run's autocast.
at::Tensor run_model(model::Transformer& model, const DeviceBatch& in, const PrecisionPolicy& precision,
                     const model::KernelPolicy& kernels) {
  const auto autocast = precision.autocast_on(kernels.device.type());
  return kernels.fused ? model.hidden_states(in.input_ids, in.positions, in.segments, nullptr, &in.packed)
                       : model.forward(in.input_ids, in.positions, in.segments, nullptr, &in.packed);
}

}  // namespace

at::Tensor token_losses(model::Transformer& model, const DeviceBatch& inputs, const at::Tensor& rows,
                        const at::Tensor& labels, const PrecisionPolicy& precision,
                        const model::KernelPolicy& kernels) {
  const at::Tensor out = run_model(model, inputs, precision, kernels);              // [B, T, hidden] or [B, T, V]
  const at::Tensor picked = out.reshape({-1, out.size(-1)}).index_select(0, rows);  // [n, hidden] or [n, V]
  if (kernels.fused) {
    return model::linear_cross_entropy_rows(picked, model.lm_head_weight(), labels, precision.compute, 0,
                                            model.args().final_logit_softcapping.value_or(0.0));
  }
  return at::cross_entropy_loss(picked.to(at::kFloat), labels, {}, at::Reduction::None, data::kIgnoreIndex);
}

int64_t NextTokenObjective::units(const data::Batch& batch) const {
  return batch.num_target_tokens;
}

at::Tensor NextTokenObjective::compute(model::Transformer& model, const data::Batch& batch,
                                       metrics::MetricSums* metrics) const {
  const DeviceBatch inputs = DeviceBatch::of(batch, kernels_.device);
  const auto labels = batch.labels.to(kernels_.device, /*non_blocking=*/true);
  const bool aux = router_aux_loss_on(router_aux_loss_, model.args());
  const RouterLogitsScope router_logits(model, aux);
  const at::Tensor out = run_model(model, inputs, precision_, kernels_);  // [B, T, hidden] or [B, T, V]
  at::Tensor loss;                                                        // F32 []
  if (kernels_.fused) {
    loss =
        model::linear_cross_entropy_sum(out.reshape({-1, out.size(-1)}), model.lm_head_weight(), labels.reshape({-1}),
                                        precision_.compute, 0, model.args().final_logit_softcapping.value_or(0.0));
  } else {
    loss = at::cross_entropy_loss(out.reshape({-1, out.size(-1)}).to(at::kFloat), labels.reshape({-1}), {},
                                  at::Reduction::Sum, data::kIgnoreIndex);
  }
  return aux ? add_router_aux_loss(model, loss, units(batch), metrics) : loss;
}

std::unique_ptr<Objective> build_objective(const Config& cfg, const PrecisionPolicy& precision,
                                           const model::KernelPolicy& kernels, const tok::Tokenizer& tokenizer,
                                           const RunContext& ctx) {
  if (cfg.train.objective == TrainObjective::kSft) {
    return std::make_unique<NextTokenObjective>(precision, kernels, cfg.model.router_aux_loss);
  }
  return build_preference_objective(cfg, precision, kernels, tokenizer, ctx);
}

}  // namespace ft::train
