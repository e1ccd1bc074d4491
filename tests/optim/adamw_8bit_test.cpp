// AdamW with 8-bit moments (optimizer.name: adamw_8bit) on the CPU: the quantizer against a brute-force nearest
// entry of bitsandbytes' maps, the trajectory against F32 AdamW, with Kahan summation on bf16 weights, the found_inf
// skip, which tensors get 8-bit moments, and state round trips. The CUDA kernel against bitsandbytes' own AdamW8bit:
// tests/quant/adamw_8bit_bnb_gpu_test.cpp.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>

#include "optim/adamw_8bit.h"
#include "optim/optimizer.h"
#include "quant/nf4.h"
#include "step_checks.h"
#include "util/error.h"

namespace ft::test {
namespace {

using optim::AdamW;
using optim::AdamWOptions;

AdamWOptions eight_bit_options(double lr) {
  AdamWOptions opts;
  opts.lr = lr;
  opts.eight_bit_moments = true;
  opts.decay_norms_and_biases = true;
  return opts;
}

double mean_abs(const at::Tensor& t) {
  return t.abs().mean().item<double>();
}

// The first step from zero moments gives m = (1 - beta1) g and v = (1 - beta2) g^2 (F32, as the kernel computes);
// each stored code must be the map entry nearest to m / absmax (v / absmax), as bitsandbytes' kernel picks it.
TEST(AdamW8bit, FirstStepStoresTheNearestMapEntryOfEachMoment) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto w = at::randn({40, 160}, gen).requires_grad_(true);  // 6400 elements: 25 blocks, none partial
  const at::Tensor g = at::randn({40, 160}, gen) * at::randn({40, 1}, gen).exp();  // rows of different scales
  w.mutable_grad() = g;
  AdamW opt({{"w", w}}, eight_bit_options(1e-3));
  opt.step();
  const auto state = opt.state_dict();
  ASSERT_EQ(state.at("w.exp_avg").scalar_type(), at::kByte);
  const struct {
    const char* key;
    at::Tensor map, exact;
  } moments[] = {{"w.exp_avg", quant::dynamic_map(), (g * (1.0f - 0.9f)).reshape({25, 256})},
                 {"w.exp_avg_sq", quant::unsigned_dynamic_map(), (g * (1.0f - 0.999f) * g).reshape({25, 256})}};
  for (const auto& mo : moments) {
    SCOPED_TRACE(mo.key);
    const at::Tensor absmax = state.at(std::string(mo.key) + ".absmax");  // F32 [25]
    EXPECT_TRUE(at::allclose(absmax, mo.exact.abs().amax(1), 1e-6, 0.0));
    const at::Tensor x = mo.exact / absmax.unsqueeze(1);                         // F32 [25, 256] in [-1, 1]
    const at::Tensor dist = (x.unsqueeze(-1) - mo.map.view({1, 1, 256})).abs();  // F32 [25, 256, 256]
    const at::Tensor best = std::get<0>(dist.min(-1));
    const at::Tensor codes = state.at(mo.key).reshape({25, 256}).to(at::kLong);
    const at::Tensor chosen = dist.gather(-1, codes.unsqueeze(-1)).squeeze(-1);
    // Nearest everywhere (a tie may go either way; the sign rule may move a tiny m one entry across zero).
    EXPECT_LE((chosen - best).max().item<float>(), 2e-6f);
    EXPECT_GT(chosen.eq(best).to(at::kFloat).mean().item<float>(), 0.999f);
  }
}

// A long run on F32 weights against F32 AdamW: the 8-bit moments' error stays a few percent of the distance moved.
TEST(AdamW8bit, FollowsF32AdamWWithinTheQuantizationError) {
  for (double wd : {0.0, 0.1}) {
    SCOPED_TRACE("weight_decay " + std::to_string(wd));
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    const at::Tensor w0 = at::randn({64, 128}, gen);
    auto a = w0.clone().requires_grad_(true), b = w0.clone().requires_grad_(true);
    AdamWOptions opts = eight_bit_options(1e-3);
    opts.weight_decay = wd;
    AdamW eight({{"w", a}}, opts);
    opts.eight_bit_moments = false;
    AdamW f32({{"w", b}}, opts);
    for (int s = 0; s < 200; ++s) {
      const at::Tensor g = at::randn({64, 128}, gen) + 0.2 * at::randn({64, 1}, gen);
      a.mutable_grad() = g;
      b.mutable_grad() = g.clone();
      eight.step();
      f32.step();
    }
    const double moved = mean_abs(b - w0), error = mean_abs(a - b);
    ASSERT_GT(moved, 0.01);
    EXPECT_LT(error, 0.05 * moved) << error << " of " << moved;  // 1.4-2.3 % when written
  }
}

// bf16 weights at lr 1e-5: plain bf16 rounds every update away; with Kahan summation the 8-bit-moment run follows F32
// AdamW (F32 moments) as the F32-moment Kahan run does, to within the moments' quantization error.
TEST(AdamW8bit, WithKahanSummationFollowsF32AdamWWhereBf16RoundsUpdatesAway) {
  AdamWOptions opts = eight_bit_options(1e-5);
  opts.kahan_summation = true;
  const auto t = run_bf16_trajectories(opts, {64, 128}, 300);
  ASSERT_EQ(t.kahan_state.at("w.exp_avg").scalar_type(), at::kByte);
  ASSERT_EQ(t.kahan_state.at("w.compensation").scalar_type(), at::kBFloat16);
  const double moved = mean_abs(t.f32 - t.start);
  ASSERT_GT(moved, 5e-4);  // 300 steps of under 1e-5
  EXPECT_EQ(mean_abs(t.plain - t.start), 0.0) << "plain bf16 should not move at this lr";
  EXPECT_LT(mean_abs(t.kahan + t.kahan_compensation - t.f32), 0.05 * moved);  // 1.9 % when written
}

// Blocks are independent, so a tensor stepped in stretches (the composite takes 1M elements at a time) gives the bits
// of its two parts stepped as separate parameters, whatever the stretch boundaries.
TEST(AdamW8bit, LargeTensorsStepInStretchesWithTheBitsOfTheirParts) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(8);
  constexpr int64_t kFirst = 4096 * 256;                                 // one stretch
  const at::Tensor w0 = at::randn({1100, 1000}, gen).to(at::kBFloat16);  // 1.1M elements: two stretches
  auto whole = w0.clone().requires_grad_(true);
  auto head = w0.view({-1}).slice(0, 0, kFirst).clone().requires_grad_(true);
  auto tail = w0.view({-1}).slice(0, kFirst).clone().requires_grad_(true);
  AdamWOptions opts = eight_bit_options(1e-3);
  opts.kahan_summation = true;
  opts.weight_decay = 0.1;
  AdamW one({{"w", whole}}, opts), two({{"head", head}, {"tail", tail}}, opts);
  for (int s = 0; s < 2; ++s) {
    const at::Tensor g = at::randn({1100, 1000}, gen).to(at::kBFloat16);
    whole.mutable_grad() = g;
    head.mutable_grad() = g.view({-1}).slice(0, 0, kFirst).clone();
    tail.mutable_grad() = g.view({-1}).slice(0, kFirst).clone();
    one.step();
    two.step();
  }
  EXPECT_TRUE(at::equal(whole.view({-1}), at::cat({head, tail})));
  const auto a = one.state_dict(), b = two.state_dict();
  for (const char* key : {".exp_avg", ".exp_avg_sq", ".compensation", ".exp_avg.absmax", ".exp_avg_sq.absmax"}) {
    EXPECT_TRUE(at::equal(a.at(std::string("w") + key).reshape({-1}),
                          at::cat({b.at(std::string("head") + key), b.at(std::string("tail") + key)})))
        << key;
  }
}

TEST(AdamW8bit, KeepsFullSizeMomentsForSmallTensorsAndEmbeddings) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
  auto big = at::randn({64, 64}, gen).requires_grad_(true);     // 4096: 8-bit
  auto small = at::randn({63, 64}, gen).requires_grad_(true);   // 4032: F32
  auto embed = at::randn({128, 64}, gen).requires_grad_(true);  // an embedding: F32
  auto bf16 = at::randn({64, 64}, gen).to(at::kBFloat16).requires_grad_(true);
  AdamW opt({{"model.layers.0.mlp.up_proj.weight", big},
             {"model.norm.weight", small},
             {"model.embed_tokens.weight", embed},
             {"lm_head.weight", bf16}},
            eight_bit_options(1e-3));
  for (auto* p : {&big, &small, &embed, &bf16}) p->mutable_grad() = at::randn_like(*p);
  opt.step();
  const auto state = opt.state_dict();
  EXPECT_EQ(state.at("model.layers.0.mlp.up_proj.weight.exp_avg").scalar_type(), at::kByte);
  EXPECT_EQ(state.at("model.layers.0.mlp.up_proj.weight.exp_avg.absmax").sizes(), at::IntArrayRef({16}));
  EXPECT_EQ(state.at("lm_head.weight.exp_avg_sq").scalar_type(), at::kByte);
  EXPECT_EQ(state.at("model.norm.weight.exp_avg").scalar_type(), at::kFloat);
  EXPECT_EQ(state.at("model.embed_tokens.weight.exp_avg_sq").scalar_type(), at::kFloat);
  EXPECT_EQ(state.count("model.norm.weight.exp_avg.absmax"), 0u);
}

TEST(AdamW8bit, SkipsFoundInfStepsAndUnscalesGradients) {
  AdamWOptions opts = eight_bit_options(1e-3);
  opts.weight_decay = 0.1;
  opts.kahan_summation = true;
  expect_found_inf_skips_and_grad_scale_divides(opts, {50, 100}, 4);  // 5000 elements: a partial last block
}

// A non-finite gradient element (without found_inf) resets its moments and keeps its weight, as bitsandbytes does.
TEST(AdamW8bit, NonFiniteGradientElementsResetTheirMomentsAndKeepTheirWeights) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(6);
  AdamWOptions opts = eight_bit_options(1e-3);
  opts.weight_decay = 0.1;
  opts.kahan_summation = true;
  auto w = at::randn({50, 100}, gen).to(at::kBFloat16).requires_grad_(true);
  AdamW opt({{"w", w}}, opts);
  w.mutable_grad() = at::randn({50, 100}, gen).to(at::kBFloat16);
  opt.step();
  const auto followed = [&] {
    return w.detach().to(at::kFloat) + opt.state_dict().at("w.compensation").to(at::kFloat);
  };
  const at::Tensor held = followed();
  at::Tensor g3 = at::randn({50, 100}, gen).to(at::kBFloat16);
  g3[0][0] = INFINITY;
  w.mutable_grad() = g3;
  opt.step();
  const at::Tensor now = followed();
  EXPECT_EQ(now[0][0].item<float>(), held[0][0].item<float>());
  EXPECT_NE(now[0][1].item<float>(), held[0][1].item<float>());
  const auto state = opt.state_dict();
  const float m00 = quant::dynamic_map()[state.at("w.exp_avg")[0][0].item<int64_t>()].item<float>();
  const float v00 = quant::unsigned_dynamic_map()[state.at("w.exp_avg_sq")[0][0].item<int64_t>()].item<float>();
  EXPECT_EQ(m00 * state.at("w.exp_avg.absmax")[0].item<float>(), 0.0f);
  EXPECT_EQ(v00 * state.at("w.exp_avg_sq.absmax")[0].item<float>(), 0.0f);
}

TEST(AdamW8bit, StateRoundTripContinuesIdenticallyAndRefusesOtherMoments) {
  AdamWOptions opts = eight_bit_options(1e-4);
  opts.kahan_summation = true;
  const auto saved = expect_round_trip_continues_identically(opts, {80, 64}, 9);
  const at::Tensor w2 = at::zeros({80, 64}, at::kBFloat16).requires_grad_(true);
  AdamW second({{"w", w2}}, opts);
  // 8-bit state cannot resume full-size moments, nor the reverse, and a scale of the wrong size is refused by name.
  const auto refusal = [](AdamW& opt, const std::map<std::string, at::Tensor>& state) -> std::string {
    try {
      opt.load_state_dict(state);
    } catch (const Error& e) {
      return e.what();
    }
    return "(loaded)";
  };
  AdamWOptions full_size = opts;
  full_size.eight_bit_moments = false;
  AdamW other({{"w", w2}}, full_size);
  EXPECT_NE(refusal(other, saved).find("was written with 8-bit moments"), std::string::npos) << refusal(other, saved);
  const auto full_state = expect_round_trip_continues_identically(full_size, {80, 64}, 10);
  EXPECT_NE(refusal(second, full_state).find("was written without 8-bit moments"), std::string::npos);
  auto bad = saved;
  bad["w.exp_avg.absmax"] = at::zeros({7});
  EXPECT_NE(refusal(second, bad).find("'w.exp_avg.absmax' has shape [7], expected [20]"), std::string::npos)
      << refusal(second, bad);
}

}  // namespace
}  // namespace ft::test
