// Mixture-of-experts models (qwen3_moe, mixtral) on CPU: the router's load-balancing loss and the training loss
// that adds it against transformers (tests/model/ref/hf_ref.py), the grouped-GEMM path of the experts against the
// per-expert loop, activation checkpointing's gradients with the aux loss, and a few training steps. The logits,
// generation and save/reload parity of these families are in parity_test.cpp.
#include <gtest/gtest.h>

#include <torch/optim/adamw.h>

#include <nlohmann/json.hpp>

#include "data/batch.h"
#include "io/safetensors.h"
#include "model/lora.h"
#include "model/mode_guards.h"
#include "model/moe.h"
#include "model/moe_experts.h"
#include "model/moe_rows.h"
#include "model/pretrained.h"
#include "model/reference.h"
#include "train/objective.h"

namespace ft::test {
namespace {

class MoeParity : public ::testing::TestWithParam<std::string> {
 protected:
  std::filesystem::path dir() const { return reference_dir() / GetParam(); }
  std::shared_ptr<model::Transformer> load() const {
    return model::load_pretrained(dir() / "model", at::kCPU, at::kFloat);
  }
  io::TensorMap ref() const { return io::read_safetensors(dir() / "ref.safetensors"); }
};

TEST_P(MoeParity, RouterAuxLossMatchesTransformers) {
  auto model = load();
  const auto r = ref();
  model->set_collect_router_logits(true);
  at::NoGradGuard no_grad;
  model->forward(r.at("input_ids"));
  const auto logits = model->take_router_logits();
  int64_t moe_layers = 0;
  for (int64_t i = 0; i < model->args().num_layers; ++i) moe_layers += model->args().moe_layer(i) ? 1 : 0;
  ASSERT_EQ(static_cast<int64_t>(logits.size()), moe_layers);
  const at::Tensor aux =
      model::load_balancing_loss(logits, model->args().num_experts, model->args().num_experts_per_tok);
  EXPECT_NEAR(aux.item<double>(), r.at("aux_loss").item<double>(), 1e-5);
}

// model.router_aux_loss: on adds coef * aux to the mean cross-entropy as transformers' loss with
// output_router_logits does, and logs aux apart; off (and auto, as config.json's output_router_logits is false)
// leaves the cross-entropy alone.
TEST_P(MoeParity, TrainingLossAddsTheAuxLossAsTransformers) {
  auto model = load();
  const auto r = ref();
  const data::Batch batch = next_token_batch(r.at("input_ids"));
  const auto kernels = model::KernelPolicy::resolve(false, at::kCPU, at::kFloat);
  const double units = static_cast<double>(batch.num_target_tokens);
  at::NoGradGuard no_grad;
  metrics::MetricSums metrics;
  const train::NextTokenObjective with_aux({}, kernels, RouterAuxLoss::kOn);
  EXPECT_NEAR(with_aux.loss_sum(*model, batch, &metrics).item<double>() / units, r.at("loss_with_aux").item<double>(),
              1e-5);
  ASSERT_EQ(metrics.size(), 1u);
  EXPECT_EQ(metrics[0].first, "aux_loss");
  EXPECT_NEAR(metrics[0].second.item<double>() / units, r.at("aux_loss").item<double>(), 1e-5);
  const double coef = model->args().router_aux_loss_coef;
  const double ce = r.at("loss_with_aux").item<double>() - coef * r.at("aux_loss").item<double>();
  for (const RouterAuxLoss setting : {RouterAuxLoss::kOff, RouterAuxLoss::kAuto}) {
    metrics::MetricSums none;
    const train::NextTokenObjective without(train::PrecisionPolicy{}, kernels, setting);
    EXPECT_NEAR(without.loss_sum(*model, batch, &none).item<double>() / units, ce, 1e-5);
    EXPECT_TRUE(none.empty());
  }
  EXPECT_TRUE(model->take_router_logits().empty()) << "the objective left router logits behind";
}

// bf16 parameters on the CPU (the routing weights in each family's dtype: qwen3_moe's in bf16, mixtral's in F32):
// the error against transformers' F32 logits, relative to their range, within 2x of transformers' own bf16 error
// plus 0.5 % (test_model_gpu's bound).
TEST_P(MoeParity, Bf16ParametersMatchTransformersAsItsBf16Does) {
  const auto r = ref();
  auto model = model::load_pretrained(dir() / "model", at::kCPU, at::kBFloat16);
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(r.at("input_ids")).to(at::kFloat);
  const auto rel = [&](const at::Tensor& x) {
    return ((x - r.at("logits")).abs().max() / r.at("logits").abs().max()).item<double>();
  };
  EXPECT_LT(rel(logits), 2.0 * rel(r.at("logits_bf16")) + 0.005) << "transformers bf16: " << rel(r.at("logits_bf16"));
}

// F32 parameters under bf16 autocast with the grouped GEMMs (at::_grouped_mm's CPU fallback): the experts' GEMMs
// run in bf16 although the composite norm hands them F32, within the same bound.
TEST_P(MoeParity, Bf16AutocastWithGroupedGemmsMatchesTransformersAsItsBf16Does) {
  const auto r = ref();
  auto model = load();
  model::KernelPolicy policy;
  policy.group_gemms = true;
  policy.compute_dtype = at::kBFloat16;
  model->set_kernel_policy(policy);
  at::NoGradGuard no_grad;
  at::Tensor logits;
  {
    const model::AutocastGuard autocast(at::kCPU, at::kBFloat16, true);
    logits = model->forward(r.at("input_ids")).to(at::kFloat);
  }
  const auto rel = [&](const at::Tensor& x) {
    return ((x - r.at("logits")).abs().max() / r.at("logits").abs().max()).item<double>();
  };
  EXPECT_LT(rel(logits), 2.0 * rel(r.at("logits_bf16")) + 0.005) << "transformers bf16: " << rel(r.at("logits_bf16"));
  EXPECT_GT(rel(logits), 1e-5) << "autocast did not reach the GEMMs";
}

INSTANTIATE_TEST_SUITE_P(Families, MoeParity, ::testing::Values("qwen3_moe", "qwen3_moe_step", "mixtral"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// One expert with no tokens, one with most: at::_grouped_mm (its CPU fallback, policy.group_gemms) and the
// per-expert GEMMs give the same outputs and gradients.
TEST(MoeExperts, GroupedGemmEqualsThePerExpertLoop) {
  at::manual_seed(3);
  const int64_t n = 12, hidden = 16, inter = 8, experts = 4, k = 2;
  const at::Tensor x = at::randn({n, hidden});
  // Two distinct experts per token among 1..3: expert 0 gets nothing.
  const at::Tensor first = at::randint(1, experts, {n}, at::kLong);
  const at::Tensor choice = at::stack({first, at::where(first == 3, at::full_like(first, 2), first + 1)}, 1);
  const at::Tensor weights = at::rand({n, k});
  const at::Tensor gate_up = at::randn({experts, 2 * inter, hidden}), down = at::randn({experts, hidden, inter});
  std::vector<at::Tensor> out, grads;
  for (const bool grouped : {false, true}) {
    model::KernelPolicy policy;
    policy.group_gemms = grouped;
    const at::Tensor xi = x.clone().requires_grad_(), wi = weights.clone().requires_grad_();
    const at::Tensor gu = gate_up.clone().requires_grad_(), dn = down.clone().requires_grad_();
    const at::Tensor y = model::ops::moe_experts(xi, choice, wi, {gu, nullptr}, {dn, nullptr}, policy);  // [n, hidden]
    y.backward(at::ones_like(y));
    out.push_back(y.detach());
    grads.insert(grads.end(), {xi.grad(), wi.grad(), gu.grad(), dn.grad()});
  }
  EXPECT_TRUE(at::allclose(out[0], out[1], 1e-5, 1e-5));
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(at::allclose(grads[i], grads[4 + i], 1e-4, 1e-5)) << i;
  EXPECT_EQ(grads[2][0].abs().max().item<float>(), 0.0f) << "the idle expert got a gradient";
  // The reference: each token's k experts, one at a time.
  at::Tensor expected = at::zeros({n, hidden});
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = choice[t][j].item<int64_t>();
      const at::Tensor gu_out = at::matmul(gate_up[e], x[t]);  // [2 I]
      const at::Tensor act = at::silu(gu_out.narrow(0, 0, inter)) * gu_out.narrow(0, inter, inter);
      expected[t] += weights[t][j] * at::matmul(down[e], act);
    }
  }
  EXPECT_TRUE(at::allclose(out[0], expected, 1e-4, 1e-5));
}

// On CUDA in bf16 (the training path: at::_grouped_mm's CUTLASS kernel), with expert adapters: outputs and
// gradients as the per-expert GEMMs give them, within bf16 rounding. Skips without CUDA.
TEST(MoeExperts, GroupedGemmOnCudaMatchesThePerExpertLoop) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(4);
  const int64_t n = 1000, hidden = 256, inter = 128, experts = 8, k = 2, rank = 8;
  const auto opts = at::TensorOptions().device(at::kCUDA);
  const at::Tensor x = at::randn({n, hidden}, opts).to(at::kBFloat16);
  const at::Tensor choice = std::get<1>(at::randn({n, experts}, opts).topk(k, -1));  // distinct experts per token
  const at::Tensor weights = at::rand({n, k}, opts).to(at::kBFloat16);
  const at::Tensor gate_up = (at::randn({experts, 2 * inter, hidden}, opts) * 0.05).to(at::kBFloat16);
  const at::Tensor down = (at::randn({experts, hidden, inter}, opts) * 0.05).to(at::kBFloat16);
  const at::Tensor lora_a = at::randn({experts * rank, hidden}, opts) * 0.05;  // F32, as trained
  const at::Tensor lora_b = at::randn({2 * inter, experts * rank}, opts) * 0.05;
  std::vector<at::Tensor> out, grads;
  for (const bool grouped : {false, true}) {
    model::KernelPolicy policy = model::KernelPolicy::resolve(true, at::Device(at::kCUDA), at::kBFloat16);
    policy.group_gemms = grouped;
    const at::Tensor xi = x.clone().requires_grad_(), gu = gate_up.clone().requires_grad_();
    model::ops::ExpertAdapter adapter{lora_a.clone().requires_grad_(), lora_b.clone().requires_grad_(), 2.0, experts};
    const at::Tensor y =
        model::ops::moe_experts(xi, choice, weights, {gu, nullptr}, {down, nullptr}, policy, &adapter);  // [n, hidden]
    y.backward(at::ones_like(y));
    out.push_back(y.detach().to(at::kFloat));
    grads.insert(grads.end(), {xi.grad().to(at::kFloat), gu.grad().to(at::kFloat), adapter.a.grad()});
  }
  const auto rel = [](const at::Tensor& a, const at::Tensor& b) {
    return ((a - b).abs().max() / b.abs().max()).item<double>();
  };
  EXPECT_LT(rel(out[1], out[0]), 2e-2);
  for (size_t i = 0; i < 3; ++i) EXPECT_LT(rel(grads[3 + i], grads[i]), 2e-2) << i;
}

// Our row kernels (model/moe_rows.h) on their own against the ATen composite of ops::moe_experts, on CUDA in bf16
// with router weights in bf16 (qwen3_moe) and F32 (mixtral): the dispatch's rows and the weighted sum's input
// gradient bit for bit, the sum and the other gradients within one bf16 rounding (the order of F32 additions).
TEST(MoeExperts, RowKernelsOnCudaMatchTheAtenCompositeWithinOneRounding) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(6);
  const int64_t n = 501, experts = 16, k = 4;
  const auto opts = at::TensorOptions().device(at::kCUDA);
  const auto rel = [](const at::Tensor& a, const at::Tensor& b) {
    return ((a.to(at::kFloat) - b.to(at::kFloat)).abs().max() / b.to(at::kFloat).abs().max()).item<double>();
  };
  for (const int64_t hidden : {256, 260}) {  // 16-byte vectors, and element by element
    const at::Tensor choice = std::get<1>(at::randn({n, experts}, opts).topk(k, -1));
    const model::ops::ExpertSlots slots = model::ops::sort_by_expert(choice, experts);
    const at::Tensor x = at::randn({n, hidden}, opts).to(at::kBFloat16);
    const at::Tensor y = at::randn({n * k, hidden}, opts).to(at::kBFloat16);
    const at::Tensor grad = at::randn({n, hidden}, opts).to(at::kBFloat16);
    for (const auto weight_dtype : {at::kBFloat16, at::kFloat}) {
      const at::Tensor w = at::rand({n * k}, opts).to(weight_dtype);
      std::vector<at::Tensor> got, want;
      for (const bool kernel : {true, false}) {
        const at::Tensor xi = x.clone().requires_grad_(), yi = y.clone().requires_grad_();
        const at::Tensor wi = w.clone().requires_grad_();
        at::Tensor xs, sum;
        if (kernel) {
          xs = model::moe_dispatch_rows(xi, slots, k);
          sum = model::moe_combine_rows(yi, wi, slots, k);
        } else {
          xs = xi.unsqueeze(1).expand({n, k, hidden}).reshape({n * k, hidden}).index_select(0, slots.order);
          sum = (yi * wi.unsqueeze(1)).to(at::kBFloat16).index_select(0, slots.inverse).view({n, k, hidden}).sum(1);
        }
        xs.backward(y);
        sum.backward(grad);
        (kernel ? got : want) = std::vector<at::Tensor>{xs.detach(), sum.detach(), xi.grad(), yi.grad(), wi.grad()};
      }
      const std::string what = std::to_string(hidden) + " " + c10::toString(weight_dtype);
      EXPECT_TRUE(at::equal(got[0], want[0])) << what << ": dispatched rows";
      EXPECT_TRUE(at::equal(got[3], want[3])) << what << ": gradient of the summed rows";
      EXPECT_LT(rel(got[1], want[1]), 8e-3) << what << ": weighted sum";
      EXPECT_LT(rel(got[2], want[2]), 8e-3) << what << ": gradient of the dispatched input";
      EXPECT_LT(rel(got[4], want[4]), weight_dtype == at::kFloat ? 1e-5 : 8e-3) << what << ": gradient of the weights";
    }
  }
}

// The whole expert computation with our kernels (the row kernels, and the SwiGLU kernel whose one rounding differs
// from the composite's two) against the ATen composite, with both expert adapters: within bf16 rounding.
TEST(MoeExperts, RowKernelsOnCudaMatchTheAtenComposite) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(5);
  const int64_t n = 777, inter = 64, experts = 8, k = 3, rank = 4;
  const auto opts = at::TensorOptions().device(at::kCUDA);
  const auto rel = [](const at::Tensor& a, const at::Tensor& b) {
    return ((a.to(at::kFloat) - b.to(at::kFloat)).abs().max() / b.to(at::kFloat).abs().max()).item<double>();
  };
  // 256: rows of whole 16-byte vectors; 260: element by element.
  for (const int64_t hidden : {256, 260}) {
    const at::Tensor x = at::randn({n, hidden}, opts).to(at::kBFloat16);
    const at::Tensor choice = std::get<1>(at::randn({n, experts}, opts).topk(k, -1));
    const at::Tensor gate_up = (at::randn({experts, 2 * inter, hidden}, opts) * 0.05).to(at::kBFloat16);
    const at::Tensor down = (at::randn({experts, hidden, inter}, opts) * 0.05).to(at::kBFloat16);
    const at::Tensor up_a = at::randn({experts * rank, hidden}, opts) * 0.05;
    const at::Tensor up_b = at::randn({2 * inter, experts * rank}, opts) * 0.05;
    const at::Tensor down_a = at::randn({experts * rank, inter}, opts) * 0.05;
    const at::Tensor down_b = at::randn({hidden, experts * rank}, opts) * 0.05;
    for (const auto weight_dtype : {at::kBFloat16, at::kFloat}) {
      const at::Tensor weights = at::rand({n, k}, opts).to(weight_dtype);
      std::vector<at::Tensor> out, grads;
      for (const bool kernels : {false, true}) {
        model::KernelPolicy policy = model::KernelPolicy::resolve(true, at::Device(at::kCUDA), at::kBFloat16);
        ASSERT_TRUE(policy.kernels) << "this build has no CUDA kernels";
        policy.kernels = kernels;
        const at::Tensor xi = x.clone().requires_grad_(), wi = weights.clone().requires_grad_();
        model::ops::ExpertAdapter up{up_a.clone().requires_grad_(), up_b.clone().requires_grad_(), 1.5, experts};
        model::ops::ExpertAdapter dn{down_a.clone().requires_grad_(), down_b.clone().requires_grad_(), 1.5, experts};
        const at::Tensor y = model::ops::moe_experts(xi, choice, wi, {gate_up, nullptr}, {down, nullptr}, policy, &up,
                                                     &dn);  // [n, hidden]
        y.backward(y.detach());  // a gradient that differs from row to row and column to column
        out.push_back(y.detach());
        grads.insert(grads.end(), {xi.grad(), wi.grad(), up.a.grad(), up.b.grad(), dn.a.grad(), dn.b.grad()});
      }
      EXPECT_LT(rel(out[1], out[0]), 2e-2) << hidden << " " << weight_dtype;
      for (size_t i = 0; i < 6; ++i) {
        EXPECT_LT(rel(grads[6 + i], grads[i]), 2e-2) << hidden << " " << weight_dtype << " gradient " << i;
      }
    }
  }
}

// The gradients of cross-entropy + aux loss (the router's through the aux loss too) are the same with the decoder
// layers checkpointed, whose router logits then come out of the checkpointed function.
TEST(MoeTraining, ActivationCheckpointingKeepsTheAuxLossGradients) {
  auto model = model::load_pretrained(reference_dir() / "qwen3_moe" / "model", at::kCPU, at::kFloat);
  const data::Batch batch =
      next_token_batch(io::read_safetensors(reference_dir() / "qwen3_moe" / "ref.safetensors").at("input_ids"));
  const train::NextTokenObjective objective({}, model::KernelPolicy::resolve(false, at::kCPU, at::kFloat),
                                            RouterAuxLoss::kOn);
  std::vector<std::vector<at::Tensor>> grads(2);
  for (const bool checkpointing : {false, true}) {
    model->set_activation_checkpointing(checkpointing);
    model->zero_grad();
    objective.loss_sum(*model, batch).backward();
    for (const auto& p : model->parameters()) grads[checkpointing].push_back(p.grad().clone());
  }
  const std::string router = "model.layers.0.mlp.gate.weight";
  ASSERT_GT(model->named_parameters()[router].grad().abs().max().item<double>(), 0.0);
  for (size_t i = 0; i < grads[0].size(); ++i) {
    EXPECT_TRUE(at::allclose(grads[0][i], grads[1][i], 1e-5, 1e-6)) << i;
  }
}

// Eight AdamW steps on one batch lower the training loss (cross-entropy + aux) of every family.
TEST(MoeTraining, FewStepsLowerTheLoss) {
  for (const std::string family : {"qwen3_moe", "mixtral"}) {
    auto model = model::load_pretrained(reference_dir() / family / "model", at::kCPU, at::kFloat);
    const data::Batch batch =
        next_token_batch(io::read_safetensors(reference_dir() / family / "ref.safetensors").at("input_ids"));
    const train::NextTokenObjective objective({}, model::KernelPolicy::resolve(false, at::kCPU, at::kFloat),
                                              RouterAuxLoss::kOn);
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3));
    const double units = static_cast<double>(batch.num_target_tokens);
    std::vector<double> losses;
    for (int step = 0; step < 8; ++step) {
      opt.zero_grad();
      const at::Tensor loss = objective.loss_sum(*model, batch) / units;
      loss.backward();
      opt.step();
      losses.push_back(loss.item<double>());
    }
    EXPECT_LT(losses.back(), losses.front() - 0.5) << family << ": " << losses.front() << " -> " << losses.back();
  }
}

// LoRA on the experts' fused weights and the router (PEFT's target_parameters), alone and together (PEFT nests the
// two expert wrappers), with B drawn nonzero: PEFT's model with our saved adapter computes our logits, the adapter
// config names them as PEFT does, our loader reads the adapter back to the same logits, and with the adapters set
// aside the base logits come back.
TEST(MoeLora, ExpertAndRouterAdaptersLoadInPeft) {
  TempDir out("ft-moe-lora");
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"qwen3_moe", {"gate_up_proj", "down_proj", "gate"}},
      {"mixtral", {"q_proj", "gate_up_proj", "down_proj", "gate"}},
      {"qwen3_moe_step", {"gate_up_proj"}},
      {"mixtral", {"down_proj"}}};
  nlohmann::json jobs = nlohmann::json::array();
  std::vector<at::Tensor> ours;
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto& [family, targets] = cases[c];
    auto model = model::load_pretrained(reference_dir() / family / "model", at::kCPU, at::kFloat);
    const auto r = io::read_safetensors(reference_dir() / family / "ref.safetensors");
    LoraConfig lora;
    lora.enabled = true;
    lora.rank = 2;
    lora.alpha = 6.0;
    lora.targets = targets;
    model::apply_lora(*model, lora, 11);
    at::NoGradGuard no_grad;
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
    for (auto& [name, t] : model::adapter_tensors(*model)) {
      if (name.find("lora_B") != std::string::npos) t.normal_(0.0, 0.3, gen);
    }
    ours.push_back(model->forward(r.at("input_ids")));
    EXPECT_GT((ours.back() - r.at("logits")).abs().max().item<double>(), 1e-2) << c << ": the adapters did nothing";
    {
      const model::AdaptersDisabled off(*model);
      EXPECT_LT((model->forward(r.at("input_ids")) - r.at("logits")).abs().max().item<double>(), 1e-4) << c;
    }
    const auto dir = out / std::to_string(c);
    model::save_adapter(*model, lora, dir / "adapter", (reference_dir() / family / "model").string());
    auto reloaded = model::load_pretrained(reference_dir() / family / "model", at::kCPU, at::kFloat);
    EXPECT_EQ(model::load_adapter(*reloaded, dir / "adapter").targets.size(), targets.size()) << c;
    EXPECT_LT((reloaded->forward(r.at("input_ids")) - ours.back()).abs().max().item<double>(), 1e-6) << c;
    io::write_safetensors(dir / "ids.safetensors", {{"input_ids", r.at("input_ids")}});
    jobs.push_back({{"model", (reference_dir() / family / "model").string()},
                    {"adapter", (dir / "adapter").string()},
                    {"ids", (dir / "ids.safetensors").string()},
                    {"out", (dir / "peft.safetensors").string()}});
  }
  const auto config = nlohmann::json::parse(read_file(out / "0" / "adapter" / "adapter_config.json"));
  EXPECT_EQ(config.at("target_parameters"), nlohmann::json({"down_proj", "gate.weight", "gate_up_proj"}));
  EXPECT_TRUE(config.at("target_modules").empty());
  const auto res = run(ref_python() + " " + shell_quote(ref_script()) + " logits --jobs " + shell_quote(jobs.dump()));
  ASSERT_EQ(res.exit_code, 0) << res.output;
  for (size_t c = 0; c < cases.size(); ++c) {
    const at::Tensor peft = io::read_safetensors(out / std::to_string(c) / "peft.safetensors").at("logits");
    EXPECT_LT((peft - ours[c]).abs().max().item<double>(), 1e-4) << c;
  }
}

}  // namespace
}  // namespace ft::test
