// Model FLOPs utilisation: achieved model FLOP/s over the GPU's peak dense bf16 FLOP/s.
//
// Training FLOPs per token (PaLM appendix B, nanoGPT's estimate_mfu):
//     flops_per_token = 6 * N + 12 * L * H * T
//   N: parameters of the matrix multiplies (attention q/k/v/o with grouped KV heads, the SwiGLU MLP's three
//      projections, the LM head); the input embedding is a lookup and is excluded.
//   6N: 2 FLOPs per multiply-add forward, 4 backward (input and weight grads).
//   12*L*H*T: attention itself (QK^T and attention*V, forward 2*2*T*H per layer and token, x3 with backward),
//      INCLUDED, counted as full (non-causal) attention as PaLM does; H = heads * head_dim (the hidden size unless
//      config.json sets head_dim).
//   Norms, activations, softmax and the loss are not counted.
// With LoRA (frozen_base): flops_per_token = 4 * N + 6 * A + 12 * L * H * T, A = adapter parameters: a frozen weight
//   costs its forward (2) and input-gradient (2) FLOPs but no weight gradient; the adapters cost 6 each.
#pragma once

#include <cstdint>
#include <string>

namespace ft::model {
struct ModelArgs;
}

namespace ft::metrics {

struct FlopsModel {
  int64_t n_layers = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t vocab = 0;
  int64_t seq_len = 0;  // T: tokens per sequence
  int64_t heads = 0;
  int64_t kv_heads = 0;        // 0 = heads (no GQA)
  bool frozen_base = false;    // LoRA: the N matmul parameters get no weight gradient
  int64_t adapter_params = 0;  // LoRA: trainable adapter parameters
  int64_t head_dim = 0;        // 0 = hidden / heads (Gemma, Qwen3: config.json's head_dim)
  // Mixtures of experts: the layers that route to experts count the experts a token runs through (experts per token
  // x each expert's SwiGLU width) and the router, not `intermediate`: the active parameters.
  int64_t moe_layers = 0;
  int64_t active_expert_width = 0;  // num_experts_per_tok x moe_intermediate_size
  int64_t experts = 0;              // the router's outputs

  // The model `args` describes, trained on sequences of `seq_len` tokens; with `frozen_base` (LoRA) only its
  // `adapter_params` adapter parameters get weight gradients.
  static FlopsModel of(const model::ModelArgs& args, int64_t seq_len, bool frozen_base = false,
                       int64_t adapter_params = 0);
};

// N as described above.
int64_t matmul_params(const FlopsModel& m);
// 6N + 12*L*H*T (4N + 6A + 12*L*H*T with a frozen base).
double flops_per_token(const FlopsModel& m);

// Peak dense bf16 TFLOP/s of one GPU from its name (e.g. "NVIDIA H200" -> 989); `configured` > 0 wins.
// 0 for an unknown device (MFU is then not reported).
double peak_tflops(const std::string& device_name, double configured = 0.0);

// tokens_per_s * flops_per_token / (peak_tflops * 1e12 * n_gpus); 0 when the peak is unknown.
double mfu(double tokens_per_s, double flops_per_token, double peak_tflops_per_gpu, int n_gpus = 1);

}  // namespace ft::metrics
