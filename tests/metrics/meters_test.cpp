// The training loop's log window: sums between two log lines and the rates a line reports.
#include <gtest/gtest.h>

#include "metrics/meters.h"

namespace ft::test {
namespace {

TEST(LogWindow, RatesAreTheWindowsSumsOverItsTimeAndResetStartsAnew) {
  metrics::LogWindow w(at::kCPU);
  w.add_step({4, 100, 128, at::scalar_tensor(250.0, at::kFloat), {{"m", at::scalar_tensor(1.0)}}, 0.5, 0.1});
  w.add_step({2, 60, 128, at::scalar_tensor(90.0, at::kFloat), {{"m", at::scalar_tensor(2.5)}}, 1.5, 0.0});
  EXPECT_EQ(w.steps(), 2);
  EXPECT_EQ(w.units(), 6);
  ASSERT_EQ(w.metric_sums().size(), 1u);
  EXPECT_EQ(w.metric_sums()[0].first, "m");
  EXPECT_DOUBLE_EQ(w.metric_sums()[0].second.item<double>(), 3.5);
  EXPECT_EQ(w.target_tokens(), 160);
  EXPECT_DOUBLE_EQ(w.positions_per_s(), 256.0 / 2.0);
  EXPECT_DOUBLE_EQ(w.target_tokens_per_s(), 160.0 / 2.0);
  EXPECT_DOUBLE_EQ(w.step_time_s(), 1.0);
  EXPECT_DOUBLE_EQ(w.data_wait_s(), 0.1);
  EXPECT_FLOAT_EQ(w.loss_sum().item<float>(), 340.0f);
  w.reset();
  EXPECT_EQ(w.steps(), 0);
  EXPECT_EQ(w.units(), 0);
  EXPECT_TRUE(w.metric_sums().empty());
  EXPECT_EQ(w.loss_sum().item<float>(), 0.0f);
  EXPECT_DOUBLE_EQ(w.step_time_s(), 0.0);  // an empty window: no division by zero
  EXPECT_DOUBLE_EQ(w.positions_per_s(), 0.0);
}

}  // namespace
}  // namespace ft::test
