// LR schedules against transformers' get_*_schedule functions at every step of several runs.
#include <gtest/gtest.h>

#include <cmath>

#include "optim/scheduler.h"
#include "support/torch_reference.h"
#include "util/error.h"

namespace ft::test {
namespace {

using optim::LrSchedule;
using optim::ScheduleOptions;
using optim::ScheduleType;

TEST(LrSchedule, EveryStepMatchesTransformers) {
  struct Case {
    const char* type;
    int64_t total, warmup_steps;
    double warmup_ratio, min_lr_ratio, decay_ratio;
  };
  const std::vector<Case> cases = {
      {"constant", 50, 10, 0.0, 0.0, 0.1}, {"linear", 60, 7, 0.0, 0.0, 0.1},   {"linear", 40, 0, 0.0, 0.2, 0.1},
      {"cosine", 80, 0, 0.1, 0.0, 0.1},    {"cosine", 100, 5, 0.0, 0.1, 0.1},  {"cosine", 33, 0, 0.05, 0.3, 0.1},
      {"wsd", 100, 10, 0.0, 0.0, 0.2},     {"wsd", 57, 0, 0.1, 0.05, 0.25}};
  nlohmann::json in;
  std::vector<LrSchedule> schedules;
  for (const auto& c : cases) {
    ScheduleOptions o;
    o.type = parse_setting<Schedule>(c.type).value();
    o.peak_lr = 3e-4;
    o.total_steps = c.total;
    o.warmup_steps = c.warmup_steps;
    o.warmup_ratio = c.warmup_ratio;
    o.min_lr_ratio = c.min_lr_ratio;
    o.decay_ratio = c.decay_ratio;
    schedules.emplace_back(o);
    const auto& s = schedules.back();
    if (c.warmup_ratio > 0) {  // transformers' TrainingArguments.get_warmup_steps
      EXPECT_EQ(s.warmup_steps(), static_cast<int64_t>(std::ceil(c.total * c.warmup_ratio)));
    }
    if (o.type == ScheduleType::kWsd) {
      EXPECT_EQ(s.decay_steps(), std::llround(c.total * c.decay_ratio));
    }
    in["cases"].push_back({{"type", c.type}, {"total", c.total}, {"warmup", s.warmup_steps()},
                           {"min_lr_ratio", c.min_lr_ratio}, {"peak_lr", 3e-4}, {"decay", s.decay_steps()},
                           {"steps", c.total + 3}});
  }
  const auto ref = run_reference("schedule", in);
  ASSERT_FALSE(ref.is_null());
  for (size_t k = 0; k < cases.size(); ++k) {
    ASSERT_EQ(ref[k].size(), static_cast<size_t>(cases[k].total + 3));
    for (int64_t step = 0; step < cases[k].total + 3; ++step) {
      const double expected = ref[k][static_cast<size_t>(step)].get<double>();
      EXPECT_NEAR(schedules[k].lr_at(step), expected, 1e-15 + 1e-12 * expected)
          << cases[k].type << " case " << k << " step " << step;
    }
  }
}

TEST(LrSchedule, RejectsBadOptions) {
  EXPECT_FALSE(parse_setting<Schedule>("exp").has_value());
  ScheduleOptions o;
  o.total_steps = 0;
  EXPECT_THROW(LrSchedule{o}, ConfigError);
  o.total_steps = 10;
  o.min_lr_ratio = 1.5;
  EXPECT_THROW(LrSchedule{o}, ConfigError);
}

}  // namespace
}  // namespace ft::test
