// Checks every AdamW variant must pass, shared by the suites of tests/optim.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace ft::test {

// The trainer passes found_inf on every step (a non-finite loss skips it): a skipped step leaves the weight and every
// state entry (moments, codes, scales, compensation, step count) as they were, and grad_scale divides the gradients:
// a bf16 weight of `shape` stepped with found_inf 0, 1 (NaN gradients), 0 (gradients x 1024, grad_scale 1024) ends
// equal to a twin stepped twice without either.
inline void expect_found_inf_skips_and_grad_scale_divides(const optim::AdamWOptions& opts,
                                                          const std::vector<int64_t>& shape, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto w = at::randn(shape, gen).to(at::kBFloat16).requires_grad_(true);
  auto twin = w.detach().clone().requires_grad_(true);
  optim::AdamW opt({{"w", w}}, opts), opt_twin({{"w", twin}}, opts);
  const at::Tensor g1 = at::randn(shape, gen).to(at::kBFloat16);
  w.mutable_grad() = g1;
  opt.step(std::nullopt, at::zeros({}, at::kFloat));
  const at::Tensor before = w.detach().clone();
  const auto state_before = opt.state_dict();
  w.mutable_grad() = at::full(shape, NAN, at::kBFloat16);
  opt.step(std::nullopt, at::ones({}, at::kFloat));
  EXPECT_TRUE(at::equal(w, before));
  for (const auto& [key, value] : opt.state_dict()) EXPECT_TRUE(at::equal(value, state_before.at(key))) << key;
  // The twin saw only the real step; gradients scaled by 1024 (exact in bf16) then step both alike.
  twin.mutable_grad() = g1.clone();
  opt_twin.step();
  const at::Tensor g2 = at::randn(shape, gen).to(at::kBFloat16);
  w.mutable_grad() = g2 * 1024.0;
  twin.mutable_grad() = g2.clone();
  opt.step(at::full({}, 1024.0, at::kFloat), at::zeros({}, at::kFloat));
  opt_twin.step();
  EXPECT_TRUE(at::equal(w, twin));
  EXPECT_EQ(opt.state_dict().at("w.step").item<float>(), 2.0f);
}

// A bf16 weight of `shape` stepped 4 times, its state_dict() loaded into a second optimizer over a copy, then both
// stepped 4 more times alike: the weights and every state entry stay equal. Returns the saved state.
inline std::map<std::string, at::Tensor> expect_round_trip_continues_identically(const optim::AdamWOptions& opts,
                                                                                 const std::vector<int64_t>& shape,
                                                                                 uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto w = at::randn(shape, gen).to(at::kBFloat16).requires_grad_(true);
  optim::AdamW first({{"w", w}}, opts);
  auto grad = [&] { return at::randn(shape, gen).to(at::kBFloat16); };
  for (int s = 0; s < 4; ++s) {
    w.mutable_grad() = grad();
    first.step();
  }
  const auto saved = first.state_dict();
  auto w2 = w.detach().clone().requires_grad_(true);
  optim::AdamW second({{"w", w2}}, opts);
  second.load_state_dict(saved);
  for (int s = 0; s < 4; ++s) {
    const at::Tensor g = grad();
    w.mutable_grad() = g;
    w2.mutable_grad() = g.clone();
    first.step();
    second.step();
  }
  EXPECT_TRUE(at::equal(w, w2));
  const auto a = first.state_dict();
  for (const auto& [key, value] : second.state_dict()) EXPECT_TRUE(at::equal(value, a.at(key))) << key;
  return saved;
}

}  // namespace ft::test
