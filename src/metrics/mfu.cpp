#include "metrics/mfu.h"

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "model/args.h"

namespace ft::metrics {
namespace {

int64_t head_dim(const FlopsModel& m) {
  return m.head_dim > 0 ? m.head_dim : m.heads > 0 ? m.hidden / m.heads : 0;
}

}  // namespace

FlopsModel FlopsModel::of(const model::ModelArgs& args, int64_t seq_len, bool frozen_base, int64_t adapter_params) {
  FlopsModel m;
  m.n_layers = args.num_layers;
  m.hidden = args.hidden_size;
  m.intermediate = args.intermediate_size;
  m.vocab = args.vocab_size;
  m.seq_len = seq_len;
  m.heads = args.num_heads;
  m.kv_heads = args.num_kv_heads;
  m.head_dim = args.head_dim;
  m.frozen_base = frozen_base;
  m.adapter_params = adapter_params;
  for (int64_t i = 0; i < args.num_layers; ++i) m.moe_layers += args.moe_layer(i) ? 1 : 0;
  m.active_expert_width = args.num_experts_per_tok * args.moe_intermediate_size;
  m.experts = args.num_experts;
  return m;
}

int64_t matmul_params(const FlopsModel& m) {
  const int64_t kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
  const int64_t d = head_dim(m);
  const int64_t attn = m.hidden * m.heads * d * 2 + m.hidden * kv * d * 2;  // q, o + k, v
  const int64_t mlp = 3 * m.hidden * m.intermediate;                        // gate, up, down
  const int64_t moe = 3 * m.hidden * m.active_expert_width + m.hidden * m.experts;  // the experts run, the router
  return m.n_layers * attn + (m.n_layers - m.moe_layers) * mlp + m.moe_layers * moe + m.vocab * m.hidden;  // + lm_head
}

double flops_per_token(const FlopsModel& m) {
  const double attention_width = static_cast<double>(m.heads * head_dim(m));
  return (m.frozen_base ? 4.0 : 6.0) * static_cast<double>(matmul_params(m)) +
         6.0 * static_cast<double>(m.adapter_params) +
         12.0 * static_cast<double>(m.n_layers) * attention_width * static_cast<double>(m.seq_len);
}

double peak_tflops(const std::string& device_name, double configured) {
  if (configured > 0.0) return configured;
  std::string name = device_name;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::toupper(c); });
  // Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's datasheets; more specific names first.
  static const std::vector<std::pair<const char*, double>> kTable = {
      {"GB200", 2500.0},  {"B200", 2250.0}, {"GH200", 989.0}, {"H200", 989.0}, {"H100 PCIE", 756.0},
      {"H100", 989.0},    {"H800", 989.0},  {"A100", 312.0},  {"A800", 312.0}, {"L40S", 362.0},
      {"L40", 181.0},     {"L4", 121.0},    {"A10G", 70.0},   {"A10", 125.0},  {"RTX 4090", 165.0},
      {"RTX 3090", 71.0}, {"V100", 125.0},  {"T4", 65.0}};
  for (const auto& [key, tflops] : kTable)
    if (name.find(key) != std::string::npos) return tflops;
  return 0.0;
}

double mfu(double tokens_per_s, double flops, double peak_tflops_per_gpu, int n_gpus) {
  if (peak_tflops_per_gpu <= 0.0 || n_gpus <= 0) return 0.0;
  return tokens_per_s * flops / (peak_tflops_per_gpu * 1e12 * n_gpus);
}

}  // namespace ft::metrics
