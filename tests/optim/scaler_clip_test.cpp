// GradScaler + clipping + fused AdamW against torch.amp.GradScaler / clip_grad_norm_ / torch.optim.AdamW.
#include <gtest/gtest.h>

#include <cmath>

#include "optim/clip.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "support/torch_reference.h"
#include "util/error.h"

namespace ft::test {
namespace {

TEST(GradScaler, InjectedInfsMatchTorchScaleAndSkipsStepByStep) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  std::vector<optim::NamedParam> params = {{"a.weight", at::randn({3, 4}, gen, at::kFloat).requires_grad_(true)},
                                           {"b.weight", at::randn({5}, gen, at::kFloat).requires_grad_(true)}};
  nlohmann::json in;
  for (auto& [n, p] : params) in["params"].push_back(to_json(p));
  optim::AdamWOptions opts;
  opts.lr = 1e-2;
  opts.weight_decay = 0.05;
  opts.decay_norms_and_biases = true;
  in["lr"] = opts.lr;
  in["weight_decay"] = opts.weight_decay;
  in["init_scale"] = 1024.0;
  in["growth_interval"] = 3;
  in["max_norm"] = 1.0;
  // Steps 2 (inf), 6 (nan) and 7 (inf) overflow; steps 0-1, 3-5, 8-13 are clean, so the scale grows twice.
  in["inject"] = {{2, 0, 5, "inf"}, {6, 1, 0, "nan"}, {7, 0, 0, "-inf"}};
  const int kSteps = 14;
  optim::AdamW opt(params, opts);
  optim::GradScaler scaler({true, 1024.0, 2.0, 0.5, 3}, at::kCPU);
  std::vector<double> scales, norms;
  std::vector<std::vector<at::Tensor>> after;
  for (int s = 0; s < kSteps; ++s) {
    nlohmann::json grads = nlohmann::json::array();
    scales.push_back(scaler.get_scale());
    std::vector<at::Tensor> gs;
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor g = at::randn(params[i].second.sizes(), gen, at::kFloat) * 0.7;
      grads.push_back(to_json(g));
      g = scaler.scale(g);  // as if backward ran on scale(loss)
      for (const auto& inj : in["inject"])
        if (inj[0] == s && inj[1] == static_cast<int>(i))
          g.view(-1)[inj[2].get<int64_t>()] = std::stod(inj[3].get<std::string>());
      params[i].second.mutable_grad() = g;
      gs.push_back(g);
    }
    in["grads"].push_back(grads);
    auto found_inf = scaler.unscale_(gs);
    ASSERT_TRUE(found_inf.has_value());
    const optim::ClipDivisor clip = optim::clip_divisor(gs, 1.0);  // torch clips the grads before its step
    norms.push_back(clip.norm.item<double>());
    opt.step(clip.divisor, found_inf);
    scaler.update();
    opt.zero_grad();
    std::vector<at::Tensor> snap;
    for (auto& [n, p] : params) snap.push_back(p.detach().clone());
    after.push_back(snap);
  }
  const auto ref = run_reference("scaler", in);
  ASSERT_FALSE(ref.is_null());
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_EQ(scales[s], ref["scale_before"][s].get<double>()) << "step " << s;
    if (ref["norm"][s].is_string()) {
      EXPECT_FALSE(std::isfinite(norms[s])) << "step " << s;
    } else {
      EXPECT_NEAR(norms[s], ref["norm"][s].get<double>(), 1e-6 * std::abs(norms[s])) << "step " << s;
    }
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_LT(max_rel_diff(after[s][i], from_json(ref["params"][s][i])), 1e-6) << "step " << s << " param " << i;
  }
  EXPECT_EQ(scaler.get_scale(), ref["scale_after"][kSteps - 1].get<double>());
  EXPECT_EQ(scaler.skipped_steps(), 3);
  EXPECT_EQ(scaler.state_dict()["growth_tracker"].get<int64_t>(), ref["growth_tracker"].get<int64_t>());
  // Closed form: 1024 -> 512 (step 2) -> grows after 3, 4, 5 -> 1024 -> 512 (6) -> 256 (7) -> 512 after 8-10
  // -> 1024 after 11-13.
  EXPECT_EQ(scaler.get_scale(), 1024.0);
}

TEST(GradScaler, DisabledIsIdentityAndStateRoundTrips) {
  optim::GradScaler off({false, 65536.0, 2.0, 0.5, 2000}, at::kCPU);
  const at::Tensor loss = at::full({}, 3.0f);
  EXPECT_TRUE(off.scale(loss).equal(loss));
  EXPECT_FALSE(off.unscale_({at::ones({2})}).has_value());
  off.update();
  EXPECT_EQ(off.get_scale(), 1.0);

  optim::GradScaler on({true, 65536.0, 2.0, 0.5, 2000}, at::kCPU);
  EXPECT_EQ(on.scale(loss).item<float>(), 3.0f * 65536.0f);
  auto g = at::full({4}, 65536.0f * 2.0f);
  on.unscale_({g});
  EXPECT_TRUE(at::equal(g, at::full({4}, 2.0f)));
  EXPECT_THROW(on.unscale_({g}), Error);  // twice in one step
  on.update();
  EXPECT_THROW(on.update(), Error);       // update without unscale_
  optim::GradScaler restored({true, 8.0, 2.0, 0.5, 2000}, at::kCPU);
  restored.load_state_dict(on.state_dict());
  EXPECT_EQ(restored.get_scale(), 65536.0);
  EXPECT_EQ(restored.state_dict()["growth_tracker"], 1);
  EXPECT_THROW(restored.load_state_dict(nlohmann::json{{"scale", "x"}}), Error);
}

TEST(ClipDivisor, DividedGradsMatchTorchClippingIncludingNonFiniteNorms) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(13);
  std::vector<at::Tensor> base = {at::randn({7, 3}, gen, at::kFloat) * 2.0, at::randn({11}, gen, at::kFloat),
                                  at::randn({2, 2, 2}, gen, at::kFloat) * 0.01};
  nlohmann::json in;
  struct Case {
    double max_norm;
    std::vector<std::array<double, 3>> nonfinite;
  };
  const std::vector<Case> cases = {{0.5, {}}, {100.0, {}}, {1.0, {{1, 3, INFINITY}}}, {1.0, {{0, 0, NAN}}}};
  for (const auto& c : cases) {
    nlohmann::json jc = {{"max_norm", c.max_norm}, {"grads", nlohmann::json::array()}};
    for (const auto& g : base) jc["grads"].push_back(to_json(g));
    for (const auto& nf : c.nonfinite) jc["nonfinite"].push_back({nf[0], nf[1], std::isnan(nf[2]) ? "nan" : "inf"});
    in["cases"].push_back(jc);
  }
  const auto ref = run_reference("clip", in);
  ASSERT_FALSE(ref.is_null());
  for (size_t k = 0; k < cases.size(); ++k) {
    std::vector<at::Tensor> grads;
    for (const auto& g : base) grads.push_back(g.clone());
    for (const auto& nf : cases[k].nonfinite)
      grads[static_cast<size_t>(nf[0])].view(-1)[static_cast<int64_t>(nf[1])] = nf[2];
    const optim::ClipDivisor clip = optim::clip_divisor(grads, cases[k].max_norm);
    const at::Tensor& norm = clip.norm;
    EXPECT_EQ(norm.scalar_type(), at::kFloat);
    ASSERT_TRUE(clip.divisor.defined());
    EXPECT_EQ(clip.divisor.dim(), 0);
    EXPECT_EQ(norm.dim(), 0);
    if (ref[k]["norm"].is_string()) {
      EXPECT_EQ(std::isnan(norm.item<double>()), ref[k]["norm"] == "nan") << "case " << k;
      EXPECT_FALSE(std::isfinite(norm.item<double>())) << "case " << k;
      continue;
    }
    EXPECT_NEAR(norm.item<double>(), ref[k]["norm"].get<double>(), 1e-6 * norm.item<double>()) << "case " << k;
    const bool under = cases[k].max_norm > norm.item<double>() + 1e-6;  // torch multiplies by exactly 1
    EXPECT_EQ(clip.divisor.item<float>() == 1.0f, under) << "case " << k;
    for (size_t i = 0; i < grads.size(); ++i) {  // what the optimizer reads
      const double diff = max_rel_diff(grads[i] / clip.divisor, from_json(ref[k]["grads"][i]));
      EXPECT_LE(diff, under ? 0.0 : 1e-6) << "case " << k << " grad " << i;
    }
  }
  const optim::ClipDivisor none = optim::clip_divisor({}, 1.0);
  EXPECT_EQ(none.norm.item<float>(), 0.0f);
  EXPECT_FALSE(none.divisor.defined());
  EXPECT_FALSE(optim::clip_divisor({at::ones({3})}, 0.0).divisor.defined());  // measures only
}

}  // namespace
}  // namespace ft::test
