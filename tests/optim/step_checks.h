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

// N steps of the same gradients on an F32 weight under F32-moment AdamW without compensation (the reference: the fused
// kernel, which matches torch) and on bf16 copies: `compensated` (Kahan summation; its moments as `compensated` says)
// and plain (the same without Kahan summation). At lr 1e-5 weights of magnitude ~1 move by far less than bf16's
// resolution there (2^-7): plain bf16 rounds every update away, the compensated copy follows the F32 weights.
struct Bf16Trajectories {
  at::Tensor start, f32, kahan, kahan_compensation, plain;
  std::map<std::string, at::Tensor> kahan_state;
};
inline Bf16Trajectories run_bf16_trajectories(const optim::AdamWOptions& compensated, const std::vector<int64_t>& shape,
                                              int steps) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor w0 = (at::rand(shape, gen) + 0.5).to(at::kBFloat16).to(at::kFloat);  // exact in bf16
  auto f32 = w0.clone().requires_grad_(true);
  auto kahan = w0.to(at::kBFloat16).requires_grad_(true);
  auto plain = w0.to(at::kBFloat16).requires_grad_(true);
  optim::AdamWOptions opts = compensated;
  opts.kahan_summation = false;
  optim::AdamW opt_plain({{"w", plain}}, opts);
  opts.eight_bit_moments = false;
  optim::AdamW opt_f32({{"w", f32}}, opts);
  optim::AdamW opt_kahan({{"w", kahan}}, compensated);
  for (int s = 0; s < steps; ++s) {
    // A drift plus noise, the same values for all three (bf16 gradients, as a bf16 model's backward gives).
    const at::Tensor g = (at::randn(shape, gen) + 0.3).to(at::kBFloat16);
    f32.mutable_grad() = g.to(at::kFloat);
    kahan.mutable_grad() = g.clone();
    plain.mutable_grad() = g.clone();
    opt_f32.step();
    opt_kahan.step();
    opt_plain.step();
  }
  auto state = opt_kahan.state_dict();
  const at::Tensor compensation = state.at("w.compensation").to(at::kFloat);
  return {
      w0, f32.detach(), kahan.detach().to(at::kFloat), compensation, plain.detach().to(at::kFloat), std::move(state)};
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
