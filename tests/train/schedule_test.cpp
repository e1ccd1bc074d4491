// The loop's schedule: when it logs, evaluates and checkpoints.
#include <gtest/gtest.h>

#include <vector>

#include "train/schedule.h"

namespace ft::test {
namespace {

std::vector<int64_t> steps_where(int64_t total, bool (train::LoopSchedule::*at)(int64_t) const,
                                 const train::LoopSchedule& s) {
  std::vector<int64_t> out;
  for (int64_t step = 1; step <= total; ++step) {
    if ((s.*at)(step)) out.push_back(step);
  }
  return out;
}

TEST(LoopSchedule, LogsEveryIntervalAndAtTheLastStepEvaluatesAndSavesOnlyBeforeIt) {
  Config cfg;
  cfg.logging.every_steps = 4;
  cfg.eval.every_steps = 5;
  cfg.checkpoint.every_steps = 3;
  const auto s = train::LoopSchedule::from_config(cfg, 10);
  EXPECT_EQ(steps_where(10, &train::LoopSchedule::log_at, s), (std::vector<int64_t>{4, 8, 10}));
  // The last step's evaluation and checkpoint come once after the loop, not from the schedule.
  EXPECT_EQ(steps_where(10, &train::LoopSchedule::eval_at, s), (std::vector<int64_t>{5}));
  EXPECT_EQ(steps_where(10, &train::LoopSchedule::checkpoint_at, s), (std::vector<int64_t>{3, 6, 9}));
}

TEST(LoopSchedule, ZeroTurnsPeriodicEvaluationAndCheckpointsOff) {
  Config cfg;
  cfg.logging.every_steps = 1;
  cfg.eval.every_steps = 0;
  cfg.checkpoint.every_steps = 0;
  const auto s = train::LoopSchedule::from_config(cfg, 6);
  EXPECT_EQ(steps_where(6, &train::LoopSchedule::log_at, s).size(), 6u);
  EXPECT_TRUE(steps_where(6, &train::LoopSchedule::eval_at, s).empty());
  EXPECT_TRUE(steps_where(6, &train::LoopSchedule::checkpoint_at, s).empty());
}

}  // namespace
}  // namespace ft::test
