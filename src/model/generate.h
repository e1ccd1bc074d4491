// Autoregressive generation with a KV cache: greedy, or temperature / top-k / top-p sampling, one prompt at a time;
// greedy over many prompts at once in left-padded batches.
#pragma once

#include <cstdint>
#include <vector>

#include "model/transformer.h"

namespace ft::model {

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  double temperature = 0.0;       // 0 = greedy (argmax)
  double top_p = 1.0;             // nucleus sampling: keep the smallest set of tokens with probability >= top_p
  int64_t top_k = 0;              // keep the k most likely tokens; 0 = all
  uint64_t seed = 0;              // sampling generator seed (CPU generator, so the same on every device)
  std::vector<int64_t> stop_ids;  // stop after emitting one of these (usually the EOS ids)
};

// Returns only the generated ids. Generation stops after max_new_tokens or right after the first stop id, which
// IS included as the last element (as transformers' generate returns it). Runs in eval mode without autograd;
// restores the model's training flag afterwards. Sampling order follows transformers: temperature, top-k, top-p.
std::vector<int64_t> generate(Transformer& model, const std::vector<int64_t>& prompt_ids,
                              const GenerateOptions& options);

// Greedy generation (options.temperature must be 0: sampling throws ft::ConfigError) of every prompt, returning what
// generate() returns for each, in the order of `prompts`. The prompts are left-padded into batches of at most
// `max_rows` rows (shortest first, fewer rows when the prefill's activations would be large) that decode together
// with one KV cache; a row that has stopped keeps decoding until every row of its batch has, and its extra ids are
// dropped.
// longrope models (phi3), whose cache generate() drops at the context switch, generate one prompt at a time.
std::vector<std::vector<int64_t>> generate_batch(Transformer& model, const std::vector<std::vector<int64_t>>& prompts,
                                                 const GenerateOptions& options, int64_t max_rows = 64);

// Where generation stops: config.json's EOS ids, plus the tokenizer's EOS id when `tokenizer_eos` >= 0 (a chat
// model ends its turn with its own end-of-turn id).
std::vector<int64_t> stop_ids_for(const Transformer& model, int64_t tokenizer_eos);

// `generated` without the stop id that ended it, if it ended with one: the ids to decode for display.
std::vector<int64_t> without_stop(std::vector<int64_t> generated, const GenerateOptions& options);

// Picks the next token from logits F32 [V] with `options` (greedy when temperature == 0).
int64_t sample_next(const at::Tensor& logits, const GenerateOptions& options, at::Generator& gen);

}  // namespace ft::model
