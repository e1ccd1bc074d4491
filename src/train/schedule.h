// When the loop's once-in-a-while work happens, decided in one place (as torchtitan's CheckpointManager._should_save
// and its validator decide): a log line every logging.every_steps and at the last step; an evaluation every
// eval.every_steps and a checkpoint every checkpoint.every_steps, but not at the last step, after which the loop
// evaluates and checkpoints once whatever the settings (0 turns the periodic ones off).
#pragma once

#include <cstdint>

#include "config/config.h"

namespace ft::train {

struct LoopSchedule {
  int64_t log_every = 1;
  int64_t eval_every = 0;
  int64_t checkpoint_every = 0;
  int64_t total_steps = 0;

  static LoopSchedule from_config(const Config& cfg, int64_t total_steps);

  // `step` counts finished optimizer steps (1-based).
  bool log_at(int64_t step) const { return step % log_every == 0 || step == total_steps; }
  bool eval_at(int64_t step) const { return eval_every > 0 && step % eval_every == 0 && step != total_steps; }
  bool checkpoint_at(int64_t step) const {
    return checkpoint_every > 0 && step % checkpoint_every == 0 && step != total_steps;
  }
  // Whether some step before the last saves a checkpoint (the loop then prepares the host memory of background saves).
  bool checkpoints_before_the_end() const { return checkpoint_every > 0 && checkpoint_every < total_steps; }
};

inline LoopSchedule LoopSchedule::from_config(const Config& cfg, int64_t total_steps) {
  return {cfg.logging.every_steps, cfg.eval.every_steps, cfg.checkpoint.every_steps, total_steps};
}

}  // namespace ft::train
