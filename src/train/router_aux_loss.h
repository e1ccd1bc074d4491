// The router's load-balancing loss of mixture-of-experts models in the training loss, as transformers'
// *MoeForCausalLM adds it: loss + router_aux_loss_coef * load_balancing_loss (model/moe.h). The objectives return
// sums over units, so it enters each micro-batch as coef * aux * units: the step's loss, divided by the step's
// units on all ranks, is then the cross-entropy mean plus coef times the units-weighted mean of the micro-batches'
// aux losses (one micro-batch on one rank: exactly transformers' loss). Logged apart as the metric "aux_loss".
// The aux loss covers every position of the micro-batch, padding included (transformers without an attention mask).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "config/config.h"
#include "metrics/meters.h"

namespace ft::model {
class Transformer;
struct ModelArgs;
}  // namespace ft::model

namespace ft::train {

// Whether model.router_aux_loss adds the loss for a model of `args`: never without experts; auto: config.json's
// output_router_logits, as transformers decides.
bool router_aux_loss_on(RouterAuxLoss setting, const model::ModelArgs& args);

// RAII: the model keeps its router logits while this lives (when `on`), and drops what it kept at the end.
class RouterLogitsScope {
 public:
  RouterLogitsScope(model::Transformer& model, bool on);
  ~RouterLogitsScope();
  RouterLogitsScope(const RouterLogitsScope&) = delete;
  RouterLogitsScope& operator=(const RouterLogitsScope&) = delete;

 private:
  model::Transformer& model_;
  bool on_;
};

// loss_sum F32 [] plus coef * aux * units, aux from the router logits the model kept since the last call; adds
// aux * units to `metrics` as "aux_loss" when given.
at::Tensor add_router_aux_loss(model::Transformer& model, const at::Tensor& loss_sum, int64_t units,
                               metrics::MetricSums* metrics);

}  // namespace ft::train
