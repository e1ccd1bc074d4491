#include "train/router_aux_loss.h"

#include "model/moe.h"
#include "model/transformer.h"
#include "util/error.h"

namespace ft::train {

bool router_aux_loss_on(RouterAuxLoss setting, const model::ModelArgs& args) {
  if (args.num_experts <= 0) return false;
  return setting == RouterAuxLoss::kOn || (setting == RouterAuxLoss::kAuto && args.output_router_logits);
}

RouterLogitsScope::RouterLogitsScope(model::Transformer& model, bool on) : model_(model), on_(on) {
  if (on_) model_.set_collect_router_logits(true);
}

RouterLogitsScope::~RouterLogitsScope() {
  if (!on_) return;
  model_.set_collect_router_logits(false);
  model_.take_router_logits();
}

at::Tensor add_router_aux_loss(model::Transformer& model, const at::Tensor& loss_sum, int64_t units,
                               metrics::MetricSums* metrics) {
  const auto& args = model.args();
  const at::Tensor aux = model::load_balancing_loss(model.take_router_logits(), args.num_experts,
                                                    args.num_experts_per_tok);  // F32 []
  FT_CHECK(aux.defined(), "router aux loss: the forward kept no router logits (collection was off)");
  const double n = static_cast<double>(units);
  if (metrics != nullptr) metrics->emplace_back("aux_loss", aux.detach() * n);
  return loss_sum + aux.to(loss_sum.device()) * (args.router_aux_loss_coef * n);
}

}  // namespace ft::train
