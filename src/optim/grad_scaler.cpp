#include "optim/grad_scaler.h"

#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>
#include <c10/core/GradMode.h>

#include <map>
#include <utility>

#include "optim/tensor_groups.h"
#include "util/error.h"
#include "util/json_int.h"

namespace ft::optim {

GradScalerOptions GradScalerOptions::from_config(const TrainConfig& cfg, bool enabled) {
  GradScalerOptions o;
  o.enabled = enabled;
  o.init_scale = cfg.loss_scale_init;
  o.growth_interval = cfg.loss_scale_interval;
  return o;
}

GradScaler::GradScaler(const GradScalerOptions& opts, at::Device device) : opts_(opts), device_(device) {
  if (!(opts.init_scale > 0.0) || !(opts.growth_factor > 1.0) ||
      !(opts.backoff_factor > 0.0 && opts.backoff_factor < 1.0) || opts.growth_interval <= 0)
    throw ConfigError(
        "loss scaler: invalid settings (init scale > 0, growth factor > 1, backoff in (0, 1), interval > 0)",
        "check train.loss_scale_init and train.loss_scale_interval");
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  scale_ = at::full({}, opts.init_scale, f32);
  growth_tracker_ = at::zeros({}, f32.dtype(at::kInt));
  skipped_ = at::zeros({}, f32.dtype(at::kLong));
}

at::Tensor GradScaler::scale(const at::Tensor& loss) const {
  if (!opts_.enabled) return loss;
  return loss * scale_.to(loss.device(), /*non_blocking=*/true).to(loss.scalar_type());
}

std::optional<at::Tensor> GradScaler::unscale_(const std::vector<at::Tensor>& grads) {
  if (!opts_.enabled) return std::nullopt;
  FT_CHECK(!found_inf_.defined(), "GradScaler::unscale_ called twice in one step; call update() after each step");
  c10::NoGradGuard no_grad;
  // The reciprocal in double, then float, as torch/amp/grad_scaler.py does (keeps 1/scale exact for powers of 2).
  const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  found_inf_ = at::zeros({}, scale_.options());
  // The kernel wants grads of one device per call; their found_infs are summed into ours.
  for (const auto& [key, indices] : group_by_device(grads, /*by_dtype=*/false)) {
    std::vector<at::Tensor> list = pick(grads, indices);
    const at::Device dev = list.front().device();
    if (dev == device_) {
      at::_amp_foreach_non_finite_check_and_unscale_(list, found_inf_, inv_scale);
    } else {
      at::Tensor inf_here = at::zeros({}, scale_.options().device(dev));
      at::_amp_foreach_non_finite_check_and_unscale_(list, inf_here, inv_scale.to(dev, /*non_blocking=*/true));
      found_inf_.add_(inf_here.to(device_, /*non_blocking=*/true));
    }
  }
  found_inf_.clamp_max_(1.0);
  return found_inf_;
}

void GradScaler::update() {
  if (!opts_.enabled) return;
  if (!found_inf_.defined())
    throw Error("GradScaler::update() without unscale_() in this step", "call unscale_(grads) before update()");
  c10::NoGradGuard no_grad;
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, opts_.growth_factor, opts_.backoff_factor,
                         opts_.growth_interval);
  skipped_.add_(found_inf_.to(at::kLong));
  found_inf_ = at::Tensor();
}

double GradScaler::get_scale() const {
  return opts_.enabled ? scale_.item<double>() : 1.0;
}

int64_t GradScaler::skipped_steps() const {
  return skipped_.item<int64_t>();
}

nlohmann::json GradScaler::state_dict() const {
  return {{"enabled", opts_.enabled},
          {"scale", scale_.item<double>()},
          {"growth_tracker", growth_tracker_.item<int64_t>()},
          {"skipped_steps", skipped_.item<int64_t>()},
          {"growth_factor", opts_.growth_factor},
          {"backoff_factor", opts_.backoff_factor},
          {"growth_interval", opts_.growth_interval}};
}

void GradScaler::load_state_dict(const nlohmann::json& state) {
  auto need = [&](const char* key) -> const nlohmann::json& {
    if (!state.is_object() || !state.contains(key) || !state.at(key).is_number())
      throw Error(std::string("loss scaler state: missing or non-numeric '") + key + "'",
                  "the checkpoint's scaler.json is damaged; resume from another checkpoint");
    return state.at(key);
  };
  const double s = need("scale").get<double>();
  int64_t tracker = 0, skipped = 0;
  try {
    tracker = json_integer<int64_t>(need("growth_tracker"), "growth_tracker");
    skipped = json_integer<int64_t>(need("skipped_steps"), "skipped_steps");
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("loss scaler state: ") + e.what(),
                "the checkpoint's scaler.json is damaged; resume from another checkpoint");
  }
  if (!(s > 0.0)) throw Error("loss scaler state: scale must be > 0", "the checkpoint's scaler.json is damaged");
  scale_.fill_(s);
  growth_tracker_.fill_(tracker);
  skipped_.fill_(skipped);
  found_inf_ = at::Tensor();
}

}  // namespace ft::optim
