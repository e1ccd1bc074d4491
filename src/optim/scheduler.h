// Learning-rate schedules with the conventions of transformers' optimization.py: lr_at(step) is the lr of the
// optimizer step that follows `step` completed steps (step 0 is the first update), like LambdaLR's last_epoch.
#pragma once

#include <cstdint>
#include <string>

#include "config/config.h"
#include "config/settings.h"

namespace ft::optim {

using ScheduleType = Schedule;  // scheduler.type

struct ScheduleOptions {
  ScheduleType type = ScheduleType::kCosine;
  double peak_lr = 3e-4;
  int64_t total_steps = 0;      // optimizer steps of the whole run (> 0)
  int64_t warmup_steps = 0;     // wins over warmup_ratio when > 0
  double warmup_ratio = 0.0;    // warmup = ceil(total_steps * warmup_ratio), as transformers' TrainingArguments
  double min_lr_ratio = 0.0;    // floor of the decay (linear, cosine, wsd), fraction of peak_lr
  double decay_ratio = 0.1;     // wsd: decay steps = round(total_steps * decay_ratio), at the end

  // The scheduler.* section, peaking at optimizer.lr, over `total_steps`.
  static ScheduleOptions from_config(const Config& cfg, int64_t total_steps);
};

class LrSchedule {
 public:
  // Throws ft::ConfigError on out-of-range options.
  explicit LrSchedule(const ScheduleOptions& opts);

  // Multiplier of peak_lr for the step after `step` completed optimizer steps.
  //  constant: warmup step/W, then 1 (get_constant_schedule_with_warmup)
  //  linear:   warmup, then linear to min_lr_ratio at total_steps (get_linear_schedule_with_warmup when the
  //            ratio is 0; with a ratio, as get_wsd_schedule with no stable phase and linear decay)
  //  cosine:   warmup, then half cosine to min_lr_ratio (get_cosine_with_min_lr_schedule_with_warmup)
  //  wsd:      warmup from min_lr_ratio, stable at 1, linear decay to min_lr_ratio over the last decay steps,
  //            min_lr_ratio afterwards (get_wsd_schedule with decay_type="linear")
  double factor_at(int64_t step) const;
  double lr_at(int64_t step) const { return opts_.peak_lr * factor_at(step); }

  int64_t warmup_steps() const { return warmup_; }
  int64_t decay_steps() const { return decay_; }   // wsd only
  int64_t stable_steps() const { return stable_; } // wsd only
  const ScheduleOptions& options() const { return opts_; }

 private:
  ScheduleOptions opts_;
  int64_t warmup_ = 0;
  int64_t decay_ = 0;
  int64_t stable_ = 0;
};

}  // namespace ft::optim
