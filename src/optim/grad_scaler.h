// Dynamic loss scaling for fp16 with torch.amp.GradScaler's semantics, on the ATen AMP ops and without host
// synchronisation in the step: found_inf and the skipped-step count stay device tensors until someone logs them.
//
// Per optimizer step:  scaler.scale(loss).backward();  auto inf = scaler.unscale_(grads);
//                      auto clip = optim::clip_divisor(grads, max_norm);  adamw.step(clip.divisor, inf);
//                      scaler.update();   (train::clip_and_step: the middle line, skipping non-finite norms too)
#pragma once

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "ckpt/stateful.h"
#include "config/config.h"

namespace ft::optim {

struct GradScalerOptions {
  bool enabled = true;           // false: scale() is the identity, unscale_() returns nullopt, update() does nothing
  double init_scale = 65536.0;   // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps before the scale grows

  // train.loss_scale_*; `enabled` from the precision policy (fp16 only).
  static GradScalerOptions from_config(const TrainConfig& cfg, bool enabled);
};

class GradScaler : public ckpt::Stateful {
 public:
  // `device`: where the scale lives (the device of the loss and the grads).
  GradScaler(const GradScalerOptions& opts, at::Device device);

  bool enabled() const { return opts_.enabled; }

  // loss * scale (same dtype as loss); the identity when disabled.
  at::Tensor scale(const at::Tensor& loss) const;

  // Divides every grad in place by the scale and records whether any value is inf/nan.
  // Returns found_inf (F32 [], 1.0 when a non-finite value was seen) for AdamW::step, or nullopt when disabled.
  // Grads on other devices than the scaler's are handled per device. Call once per optimizer step.
  std::optional<at::Tensor> unscale_(const std::vector<at::Tensor>& grads);

  // Backs the scale off on inf, grows it after growth_interval clean steps (at::_amp_update_scale_) and counts
  // skipped steps. Throws ft::Error when unscale_() was not called since the last update().
  void update();

  // The current scale, F32 [] on the device (no sync).
  const at::Tensor& scale_tensor() const { return scale_; }
  // Steps skipped because of inf/nan so far, I64 [] on the device (no sync).
  const at::Tensor& skipped_steps_tensor() const { return skipped_; }
  // Host reads (synchronise): for logging and checkpoints only. get_scale() is 1.0 when disabled.
  double get_scale() const;
  int64_t skipped_steps() const;

  // {"enabled", "scale", "growth_tracker", "skipped_steps", "growth_factor", "backoff_factor", "growth_interval"}.
  nlohmann::json state_dict() const override;
  // Restores state(); the factors/interval of the current options win (a changed config is allowed).
  // Throws ft::Error on missing or mistyped keys.
  void load_state_dict(const nlohmann::json& state) override;

 private:
  GradScalerOptions opts_;
  at::Device device_;
  at::Tensor scale_;           // F32 []
  at::Tensor growth_tracker_;  // I32 []: consecutive clean steps
  at::Tensor skipped_;         // I64 []
  at::Tensor found_inf_;       // F32 []: of the last unscale_, undefined after update()
};

}  // namespace ft::optim
