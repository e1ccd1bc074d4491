#include "optim/scheduler.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"
#include "util/fmt.h"

namespace ft::optim {

ScheduleOptions ScheduleOptions::from_config(const Config& cfg, int64_t total_steps) {
  ScheduleOptions o;
  o.type = cfg.scheduler.type;
  o.peak_lr = cfg.optimizer.lr;
  o.total_steps = total_steps;
  o.warmup_steps = cfg.scheduler.warmup_steps;
  o.warmup_ratio = cfg.scheduler.warmup_ratio;
  o.min_lr_ratio = cfg.scheduler.min_lr_ratio;
  o.decay_ratio = cfg.scheduler.decay_ratio;
  return o;
}

LrSchedule::LrSchedule(const ScheduleOptions& opts) : opts_(opts) {
  if (opts.total_steps <= 0)
    throw ConfigError(fmt::format("scheduler: total steps must be > 0 (got {})", opts.total_steps),
                      "set train.max_steps or train.epochs so that the run has at least one optimizer step");
  if (opts.warmup_steps < 0 || opts.warmup_ratio < 0.0 || opts.warmup_ratio > 1.0)
    throw ConfigError(fmt::format("scheduler: warmup_steps = {} / warmup_ratio = {} out of range", opts.warmup_steps,
                                  opts.warmup_ratio),
                      "warmup_steps must be >= 0 and warmup_ratio in [0, 1]");
  if (opts.min_lr_ratio < 0.0 || opts.min_lr_ratio > 1.0)
    throw ConfigError(fmt::format("scheduler.min_lr_ratio = {} out of range", opts.min_lr_ratio),
                      "use a value in [0, 1]");
  if (opts.decay_ratio < 0.0 || opts.decay_ratio > 1.0)
    throw ConfigError(fmt::format("scheduler.decay_ratio = {} out of range", opts.decay_ratio),
                      "use a value in [0, 1]");
  warmup_ = opts.warmup_steps > 0
                ? opts.warmup_steps
                : static_cast<int64_t>(std::ceil(static_cast<double>(opts.total_steps) * opts.warmup_ratio));
  if (opts.type == ScheduleType::kWsd) {
    decay_ = static_cast<int64_t>(std::llround(static_cast<double>(opts.total_steps) * opts.decay_ratio));
    stable_ = std::max<int64_t>(0, opts.total_steps - warmup_ - decay_);
  }
}

double LrSchedule::factor_at(int64_t step) const {
  const double s = static_cast<double>(step);
  const double w = static_cast<double>(warmup_);
  const double total = static_cast<double>(opts_.total_steps);
  const double floor = opts_.min_lr_ratio;
  switch (opts_.type) {
    case ScheduleType::kConstant:
      return step < warmup_ ? s / std::max(1.0, w) : 1.0;
    case ScheduleType::kLinear: {
      if (step < warmup_) return s / std::max(1.0, w);
      const double f = std::max(0.0, (total - s) / std::max(1.0, total - w));
      return std::max(0.0, f * (1.0 - floor) + floor);
    }
    case ScheduleType::kCosine: {
      if (step < warmup_) return s / std::max(1.0, w);
      const double progress = (s - w) / std::max(1.0, total - w);
      const double f = 0.5 * (1.0 + std::cos(M_PI * 2.0 * 0.5 * progress));
      return std::max(0.0, f * (1.0 - floor) + floor);
    }
    case ScheduleType::kWsd: {
      if (step < warmup_) return std::max(0.0, (s / std::max(1.0, w)) * (1.0 - floor) + floor);
      if (step < warmup_ + stable_) return 1.0;
      if (step < warmup_ + stable_ + decay_) {
        const double progress = (s - w - static_cast<double>(stable_)) / std::max(1.0, static_cast<double>(decay_));
        return std::max(0.0, (1.0 - progress) * (1.0 - floor) + floor);
      }
      return floor;
    }
  }
  return 1.0;
}

}  // namespace ft::optim
