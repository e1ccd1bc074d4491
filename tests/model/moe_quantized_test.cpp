// Quantized expert weights (model.quantize nf4 / fp8 on qwen3_moe and mixtral, model/quantized_experts.h): the
// grouped GEMMs over the codes against the dense experts holding the dequantized values, a loaded quantized model
// against its dense twin whose every quantized weight holds its dequantized values, and LoRA trained over
// quantized experts. The codes themselves are checked against bitsandbytes and torchao in tests/quant.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <torch/optim/adamw.h>

#include <string>
#include <vector>

#include "data/batch.h"
#include "io/safetensors.h"
#include "model/lora.h"
#include "model/moe_experts.h"
#include "model/pretrained.h"
#include "model/quantized_experts.h"
#include "model/reference.h"
#include "quant/fp8.h"
#include "quant/nf4.h"
#include "train/objective.h"
#include "util/error.h"

namespace ft::test {
namespace {

using model::ops::ExpertWeight;

const char* format_name(BaseQuantization f) {
  return f == BaseQuantization::kNf4 ? "nf4" : "fp8";
}

// The values a weight of any rank holds after quantize + dequantize in `format` (F32): what the dense twin holds.
at::Tensor round_trip(const at::Tensor& w, BaseQuantization format) {
  if (format == BaseQuantization::kNf4) return quant::dequantize_nf4(quant::quantize_nf4(w), at::kFloat);
  const at::Tensor rows = w.reshape({-1, w.size(-1)});
  return quant::dequantize_fp8_rows(quant::quantize_fp8_rows(rows), at::kFloat).view(w.sizes());
}

// The reference of a model loaded with `format`: its projections quantized the same way (their GEMMs are tested in
// nf4_linear_test.cpp and fp8_linear_test.cpp), its experts dense, holding what `format` keeps of them.
std::shared_ptr<model::Transformer> dequantized_twin(const std::filesystem::path& dir, BaseQuantization format) {
  auto twin = model::load_pretrained(dir, at::kCPU, at::kFloat);
  at::NoGradGuard no_grad;
  for (auto& [path, lin] : twin->projections()) {
    if (format == BaseQuantization::kNf4) {
      lin->quantize_nf4(at::Tensor(), at::kFloat, quant::kNf4Blocksize);
    } else {
      lin->quantize_fp8(at::Tensor(), at::kFloat);
    }
  }
  for (auto& [path, experts] : twin->moe_experts()) {
    experts->gate_up_proj.copy_(round_trip(experts->gate_up_proj, format));
    experts->down_proj.copy_(round_trip(experts->down_proj, format));
  }
  return twin;
}

// With two experts idle and adapters on both weights, moe_experts over the codes gives the outputs of the dense
// experts holding the dequantized values bit for bit (the same GEMMs on the same values), and the same input and
// adapter gradients; the codes get no gradient. Per-expert GEMMs and at::_grouped_mm's CPU fallback alike.
TEST(QuantizedExperts, GemmsEqualTheDenseExpertsOfTheDequantizedWeights) {
  at::manual_seed(7);
  const int64_t n = 20, hidden = 64, inter = 32, experts = 6, k = 2, rank = 4;
  const at::Tensor x = at::randn({n, hidden});
  const at::Tensor choice = std::get<1>(at::randn({n, experts - 2}).topk(k, -1)) + 2;  // experts 0 and 1 idle
  const at::Tensor weights = at::rand({n, k});
  const at::Tensor gate_up = at::randn({experts, 2 * inter, hidden}) * 0.05;
  const at::Tensor down = at::randn({experts, hidden, inter}) * 0.05;
  const at::Tensor up_a = at::randn({experts * rank, hidden}) * 0.1, up_b = at::randn({2 * inter, experts * rank});
  const at::Tensor down_a = at::randn({experts * rank, inter}) * 0.1, down_b = at::randn({hidden, experts * rank});
  for (const auto format : {BaseQuantization::kNf4, BaseQuantization::kFp8}) {
    for (const bool grouped : {false, true}) {
      SCOPED_TRACE(std::string(format_name(format)) + (grouped ? " grouped" : " per expert"));
      model::KernelPolicy policy;
      policy.group_gemms = grouped;
      auto q_gate_up =
          std::make_shared<const model::QuantizedExperts>(model::quantize_experts(gate_up, format, at::kFloat));
      auto q_down = std::make_shared<const model::QuantizedExperts>(model::quantize_experts(down, format, at::kFloat));
      const std::vector<ExpertWeight> sides[2] = {
          {{q_gate_up->dequantize(at::kFloat, policy), nullptr}, {q_down->dequantize(at::kFloat, policy), nullptr}},
          {{at::Tensor(), q_gate_up}, {at::Tensor(), q_down}}};
      std::vector<at::Tensor> out, grads;
      for (const auto& side : sides) {
        const at::Tensor xi = x.clone().requires_grad_();
        model::ops::ExpertAdapter up{up_a.clone().requires_grad_(), up_b.clone().requires_grad_(), 2.0, experts};
        model::ops::ExpertAdapter dn{down_a.clone().requires_grad_(), down_b.clone().requires_grad_(), 0.5, experts};
        const at::Tensor y = model::ops::moe_experts(xi, choice, weights, side[0], side[1], policy, &up, &dn);
        y.backward(at::cos(y.detach()));
        out.push_back(y.detach());
        grads.insert(grads.end(), {xi.grad(), up.a.grad(), up.b.grad(), dn.a.grad(), dn.b.grad()});
      }
      EXPECT_TRUE(at::equal(out[0], out[1]));
      for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(at::allclose(grads[i], grads[5 + i], 1e-5, 1e-7)) << i;
      EXPECT_GT(grads[0].abs().max().item<double>(), 0.0);
    }
  }
}

// qwen3_moe in NF4 and mixtral in FP8, loaded with model.quantize: the experts' dense weights are gone (no
// parameters, no base tensors to save), and the logits are those of the twin whose experts are dense, holding the
// dequantized values; they differ from the unquantized model's. Weights drawn with init_weights are quantized the
// same way.
TEST(QuantizedExperts, LoadedQuantizedModelComputesItsDequantizedTwinsLogits) {
  const std::vector<std::pair<std::string, BaseQuantization>> cases = {{"qwen3_moe", BaseQuantization::kNf4},
                                                                       {"mixtral", BaseQuantization::kFp8}};
  for (const auto& [family, format] : cases) {
    SCOPED_TRACE(family);
    const auto dir = reference_dir() / family / "model";
    const auto ref = io::read_safetensors(reference_dir() / family / "ref.safetensors");
    auto quantized = model::load_pretrained(dir, at::kCPU, at::kFloat, format);
    ASSERT_FALSE(quantized->moe_experts().empty());
    for (const auto& [path, experts] : quantized->moe_experts()) {
      EXPECT_FALSE(experts->gate_up_proj.defined());
      ASSERT_NE(experts->down_codes, nullptr);
      EXPECT_EQ(experts->down_codes->nf4 != nullptr, format == BaseQuantization::kNf4);
      EXPECT_LT(experts->down_codes->storage_bytes(), experts->down_codes->numel() * 2);  // below bf16
    }
    for (const auto& [name, _] : model::base_parameters(*quantized)) {
      EXPECT_EQ(name.find("experts"), std::string::npos) << name;
    }
    at::NoGradGuard no_grad;
    const at::Tensor ids = ref.at("input_ids");
    const at::Tensor logits = quantized->forward(ids);
    const at::Tensor twin = dequantized_twin(dir, format)->forward(ids);
    EXPECT_LT((logits - twin).abs().max().item<double>(), 1e-5);
    EXPECT_GT((logits - ref.at("logits")).abs().max().item<double>(), 1e-4) << "quantization changed nothing";

    auto drawn = model::load_pretrained(dir, at::kCPU, at::kFloat);
    model::init_weights(*drawn, 0.02, 3, at::Device(at::kCPU), at::kFloat, format);
    for (const auto& [path, experts] : drawn->moe_experts()) EXPECT_NE(experts->gate_up_codes, nullptr);
    EXPECT_TRUE(at::isfinite(drawn->forward(ids)).all().item<bool>());
  }
}

const std::filesystem::path& qwen3_moe_dir() {
  static const std::filesystem::path dir = reference_dir() / "qwen3_moe" / "model";
  return dir;
}

data::Batch qwen3_moe_batch() {
  return next_token_batch(io::read_safetensors(reference_dir() / "qwen3_moe" / "ref.safetensors").at("input_ids"));
}

// The training loss (cross-entropy + the routers' aux loss) summed over the target tokens, on the CPU.
at::Tensor loss_sum(model::Transformer& m, const data::Batch& batch) {
  static const train::NextTokenObjective objective({}, model::KernelPolicy::resolve(false, at::kCPU, at::kFloat),
                                                   RouterAuxLoss::kOn);
  return objective.loss_sum(m, batch);
}

// LoRA r2 on `targets`, added to `m` with B filled with `b` (nonzero, so that A gets a gradient too).
LoraConfig add_adapters(model::Transformer& m, std::vector<std::string> targets, double b) {
  LoraConfig lora;
  lora.enabled = true;
  lora.rank = 2;
  lora.alpha = 4.0;
  lora.targets = std::move(targets);
  model::apply_lora(m, lora, 11);
  at::NoGradGuard no_grad;
  for (auto& [name, t] : model::adapter_tensors(m)) {
    if (name.find("lora_B") != std::string::npos) t.fill_(b);
  }
  return lora;
}

// The adapters' gradients of one backward of the loss on `batch`.
std::vector<at::Tensor> adapter_grads(model::Transformer& m, const data::Batch& batch) {
  m.zero_grad();
  loss_sum(m, batch).backward();
  std::vector<at::Tensor> grads;
  for (auto& [name, t] : model::adapter_tensors(m)) grads.push_back(t.grad().clone());
  return grads;
}

// LoRA r2 on attention and on NF4 experts: the adapters' gradients equal those of the twin with dense experts and the
// same adapters, a few AdamW steps lower the loss, the saved adapter reloads onto a fresh quantized base to the same
// logits, and merging into the codes is refused with a hint.
TEST(QuantizedExperts, LoraOverNf4ExpertsTrainsLikeTheDequantizedTwin) {
  const data::Batch batch = qwen3_moe_batch();
  const std::vector<std::string> targets = {"q_proj", "gate_up_proj", "down_proj"};
  auto quantized = model::load_pretrained(qwen3_moe_dir(), at::kCPU, at::kFloat, BaseQuantization::kNf4);
  auto twin = dequantized_twin(qwen3_moe_dir(), BaseQuantization::kNf4);
  const LoraConfig lora = add_adapters(*quantized, targets, 0.01);
  add_adapters(*twin, targets, 0.01);
  const auto ours = adapter_grads(*quantized, batch), theirs = adapter_grads(*twin, batch);
  ASSERT_EQ(ours.size(), theirs.size());
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_TRUE(at::allclose(ours[i], theirs[i], 1e-4, 1e-6)) << i;

  std::vector<at::Tensor> trainable;
  for (const auto& p : quantized->parameters()) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  torch::optim::AdamW opt(trainable, torch::optim::AdamWOptions(1e-2));
  const double units = static_cast<double>(batch.num_target_tokens);
  std::vector<double> losses;
  for (int step = 0; step < 6; ++step) {
    opt.zero_grad();
    const at::Tensor loss = loss_sum(*quantized, batch) / units;
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  EXPECT_LT(losses.back(), losses.front() - 0.1) << losses.front() << " -> " << losses.back();

  TempDir out("ft-moe-quantized");
  model::save_adapter(*quantized, lora, out / "adapter", qwen3_moe_dir().string());
  auto reloaded = model::load_pretrained(qwen3_moe_dir(), at::kCPU, at::kFloat, BaseQuantization::kNf4);
  model::load_adapter(*reloaded, out / "adapter");
  at::NoGradGuard no_grad;
  EXPECT_TRUE(at::equal(reloaded->forward(batch.input_ids), quantized->forward(batch.input_ids)));
  EXPECT_THROW(model::merge_lora(*quantized), Error);
}

// With the decoder layers checkpointed, the recompute keeps its dequantized weights for the backward that follows
// (model/recompute.h) instead of dequantizing them again: the adapters' gradients on the NF4 base (attention and
// experts) are those of the uncheckpointed model.
TEST(QuantizedExperts, CheckpointedLayersGiveTheAdaptersTheSameGradients) {
  const data::Batch batch = qwen3_moe_batch();
  auto m = model::load_pretrained(qwen3_moe_dir(), at::kCPU, at::kFloat, BaseQuantization::kNf4);
  add_adapters(*m, {"q_proj", "o_proj", "gate_up_proj", "down_proj"}, 0.02);
  const auto plain = adapter_grads(*m, batch);
  m->set_activation_checkpointing(true);
  const auto checkpointed = adapter_grads(*m, batch);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_GT(plain[i].abs().max().item<double>(), 0.0) << i;
    EXPECT_TRUE(at::allclose(plain[i], checkpointed[i], 1e-5, 1e-7)) << i;
  }
}

// On CUDA in bf16 with our dequantization kernel: the grouped GEMMs over NF4 experts give the dense experts' outputs
// for the ATen dequantization's values bit for bit (the kernel writes the same bits), and their input gradients
// within one bf16 rounding. Skips without CUDA.
TEST(QuantizedExperts, Nf4ExpertsOnCudaEqualTheAtenDequantization) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(9);
  const int64_t n = 512, hidden = 256, inter = 128, experts = 8, k = 2;
  const auto opts = at::TensorOptions().device(at::kCUDA);
  const at::Tensor x = at::randn({n, hidden}, opts).to(at::kBFloat16);
  const at::Tensor choice = std::get<1>(at::randn({n, experts}, opts).topk(k, -1));
  const at::Tensor weights = at::rand({n, k}, opts).to(at::kBFloat16);
  const at::Tensor gate_up = (at::randn({experts, 2 * inter, hidden}, opts) * 0.05).to(at::kBFloat16);
  const at::Tensor down = (at::randn({experts, hidden, inter}, opts) * 0.05).to(at::kBFloat16);
  const model::KernelPolicy policy = model::KernelPolicy::resolve(true, at::Device(at::kCUDA), at::kBFloat16);
  auto q_gate_up = std::make_shared<const model::QuantizedExperts>(
      model::quantize_experts(gate_up, BaseQuantization::kNf4, at::kBFloat16));
  auto q_down = std::make_shared<const model::QuantizedExperts>(
      model::quantize_experts(down, BaseQuantization::kNf4, at::kBFloat16));
  ASSERT_TRUE(
      at::equal(q_gate_up->dequantize(at::kBFloat16, policy), quant::dequantize_nf4(*q_gate_up->nf4, at::kBFloat16)));
  const std::vector<ExpertWeight> sides[2] = {{{quant::dequantize_nf4(*q_gate_up->nf4, at::kBFloat16), nullptr},
                                               {quant::dequantize_nf4(*q_down->nf4, at::kBFloat16), nullptr}},
                                              {{at::Tensor(), q_gate_up}, {at::Tensor(), q_down}}};
  std::vector<at::Tensor> out, grads;
  for (const auto& side : sides) {
    const at::Tensor xi = x.clone().requires_grad_();
    const at::Tensor y = model::ops::moe_experts(xi, choice, weights, side[0], side[1], policy);
    y.backward(at::ones_like(y));
    out.push_back(y.detach());
    grads.push_back(xi.grad().to(at::kFloat));
  }
  EXPECT_TRUE(at::equal(out[0], out[1]));
  EXPECT_LT(((grads[1] - grads[0]).abs().max() / grads[0].abs().max()).item<double>(), 1e-2);
}

}  // namespace
}  // namespace ft::test
