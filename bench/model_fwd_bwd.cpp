// bench_model: forward + backward of a Llama-3-8B-shaped model with random bf16 weights, reporting time per step,
// tokens/s, an estimated TFLOP/s and peak GPU memory.
//   bench_model [--batch 1] [--seq 2048] [--steps 3] [--layers 32] [--device cuda] [--checkpointing] [--lora]
// --layers shrinks the depth (e.g. for a CPU smoke run); every other dimension is Llama 3 8B's.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include "model/lora.h"
#include "model/transformer.h"
#include "util/error.h"

#ifdef FT_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace {

struct Options {
  int64_t batch = 1, seq = 2048, steps = 3, layers = 32;
  std::string device = "cuda";
  bool checkpointing = false, lora = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw ft::ConfigError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--batch") o.batch = std::stoll(next());
    else if (a == "--seq") o.seq = std::stoll(next());
    else if (a == "--steps") o.steps = std::stoll(next());
    else if (a == "--layers") o.layers = std::stoll(next());
    else if (a == "--device") o.device = next();
    else if (a == "--checkpointing") o.checkpointing = true;
    else if (a == "--lora") o.lora = true;
    else throw ft::ConfigError("unknown option " + a, "see the comment at the top of bench/model_fwd_bwd.cpp");
  }
  return o;
}

ft::model::ModelArgs llama3_8b(int64_t layers) {
  ft::model::ModelArgs a;
  a.model_type = "llama";
  a.vocab_size = 128256;
  a.hidden_size = 4096;
  a.intermediate_size = 14336;
  a.num_layers = layers;
  a.num_heads = 32;
  a.num_kv_heads = 8;
  a.head_dim = 128;
  a.max_position_embeddings = 131072;
  a.rope_theta = 500000.0;
  a.rope_scaling.type = "llama3";
  a.rope_scaling.factor = 8.0;
  a.rope_scaling.low_freq_factor = 1.0;
  a.rope_scaling.high_freq_factor = 4.0;
  a.rope_scaling.original_max_position_embeddings = 8192;
  a.rms_norm_eps = 1e-5;
  a.torch_dtype = "bfloat16";
  return a;
}

void sync(const at::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index() < 0 ? 0 : d.index());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const at::Device device(o.device);
    const auto args = llama3_8b(o.layers);
    auto model = std::make_shared<ft::model::Transformer>(args);
    model->to(device, at::kBFloat16);
    {
      at::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.normal_(0.0, 0.02);
    }
    if (o.lora) {
      ft::LoraConfig cfg;
      cfg.rank = 16;
      cfg.alpha = 32;
      cfg.targets = ft::model::lora_target_names(args);
      ft::model::apply_lora(*model, cfg, 0);
    }
    model->set_activation_checkpointing(o.checkpointing);
    model->train();
    int64_t n_params = 0, n_trainable = 0;
    for (const auto& p : model->parameters()) {
      n_params += p.numel();
      if (p.requires_grad()) n_trainable += p.numel();
    }
    const auto ids = at::randint(0, args.vocab_size, {o.batch, o.seq + 1}, at::TensorOptions().dtype(at::kLong).device(device));
    const at::Tensor inputs = ids.narrow(1, 0, o.seq), labels = ids.narrow(1, 1, o.seq);
    double total_s = 0.0;
#ifdef FT_WITH_CUDA
    if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
#endif
    for (int64_t step = 0; step <= o.steps; ++step) {  // step 0 warms up (kernel selection, allocator)
      sync(device);
      const auto t0 = std::chrono::steady_clock::now();
      const at::Tensor logits = model->forward(inputs);  // BF16 [B, T, V]
      const at::Tensor loss = at::cross_entropy_loss(logits.view({-1, args.vocab_size}).to(at::kFloat),
                                                     labels.reshape({-1}));
      loss.backward();
      sync(device);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
      std::cout << "step " << step << (step == 0 ? " (warm-up)" : "") << ": " << s << " s, loss "
                << loss.item<double>() << "\n";
      if (step > 0) total_s += s;
    }
    const double per_step = total_s / static_cast<double>(std::max<int64_t>(o.steps, 1));
    const double tokens = static_cast<double>(o.batch * o.seq);
    // 6 N per token for the matmuls of forward + backward, plus causal attention (12 L T d / 2 per token).
    const double flops = tokens * (6.0 * static_cast<double>(n_params) +
                                   6.0 * static_cast<double>(args.num_layers * o.seq * args.hidden_size));
    std::cout << "model: " << args.num_layers << " layers, " << n_params / 1e9 << " B params (" << n_trainable / 1e9
              << " B trainable), bf16, batch " << o.batch << " x seq " << o.seq
              << (o.checkpointing ? ", activation checkpointing" : "") << (o.lora ? ", LoRA r=16 all targets" : "")
              << "\n";
    std::cout << "forward+backward: " << per_step << " s/step, " << tokens / per_step << " tokens/s, ~"
              << flops / per_step / 1e12 << " TFLOP/s\n";
#ifdef FT_WITH_CUDA
    if (device.is_cuda()) {
      const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
      std::cout << "peak GPU memory allocated: " << static_cast<double>(stats.allocated_bytes[0].peak) / (1 << 30)
                << " GiB, reserved: " << static_cast<double>(stats.reserved_bytes[0].peak) / (1 << 30) << " GiB\n";
    }
#endif
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_model: " << e.what() << "\n";
    return 1;
  }
}
