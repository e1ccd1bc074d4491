// Autoregressive generation with a KV cache: greedy, or temperature / top-k / top-p sampling.
#pragma once

#include <cstdint>
#include <vector>

#include "model/transformer.h"

namespace ft::model {

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  double temperature = 0.0;  // 0 = greedy (argmax)
  double top_p = 1.0;        // nucleus sampling: keep the smallest set of tokens with probability >= top_p
  int64_t top_k = 0;         // keep the k most likely tokens; 0 = all
  uint64_t seed = 0;         // sampling generator seed (CPU generator, so the same on every device)
  std::vector<int64_t> stop_ids;  // stop after emitting one of these (usually the EOS ids)
};

// Returns only the generated ids. Generation stops after max_new_tokens or right after the first stop id, which
// IS included as the last element (as transformers' generate returns it). Runs in eval mode without autograd;
// restores the model's training flag afterwards. Sampling order follows transformers: temperature, top-k, top-p.
std::vector<int64_t> generate(Transformer& model, const std::vector<int64_t>& prompt_ids,
                              const GenerateOptions& options);

// Where generation stops: config.json's EOS ids, plus the tokenizer's EOS id when `tokenizer_eos` >= 0 (a chat
// model ends its turn with its own end-of-turn id).
std::vector<int64_t> stop_ids_for(const Transformer& model, int64_t tokenizer_eos);

// `generated` without the stop id that ended it, if it ended with one: the ids to decode for display.
std::vector<int64_t> without_stop(std::vector<int64_t> generated, const GenerateOptions& options);

// Picks the next token from logits F32 [V] with `options` (greedy when temperature == 0).
int64_t sample_next(const at::Tensor& logits, const GenerateOptions& options, at::Generator& gen);

}  // namespace ft::model
