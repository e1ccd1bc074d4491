#include "model/generate.h"

#include <algorithm>

#include "model/mode_guards.h"
#include "util/error.h"

namespace ft::model {

int64_t sample_next(const at::Tensor& logits, const GenerateOptions& o, at::Generator& gen) {
  if (o.temperature <= 0.0) return logits.argmax().item<int64_t>();
  at::Tensor scores = logits.to(at::kFloat).cpu() / o.temperature;  // [V]
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (o.top_k > 0 && o.top_k < scores.size(0)) {
    const at::Tensor kth = std::get<0>(scores.topk(o.top_k)).select(0, o.top_k - 1);
    scores = scores.masked_fill(scores < kth, neg_inf);
  }
  if (o.top_p < 1.0) {
    auto [sorted, order] = scores.sort(/*dim=*/0, /*descending=*/false);
    at::Tensor cum = sorted.softmax(0).cumsum(0);
    at::Tensor remove = cum <= (1.0 - o.top_p);
    remove.index_put_({-1}, false);  // always keep the most likely token
    scores = scores.scatter(0, order, sorted.masked_fill(remove, neg_inf));
  }
  at::Tensor probs = scores.softmax(0);
  return at::multinomial(probs, 1, false, gen).item<int64_t>();
}

std::vector<int64_t> stop_ids_for(const Transformer& model, int64_t tokenizer_eos) {
  std::vector<int64_t> ids = model.args().eos_token_ids;
  if (tokenizer_eos >= 0) ids.push_back(tokenizer_eos);
  return ids;
}

std::vector<int64_t> without_stop(std::vector<int64_t> generated, const GenerateOptions& options) {
  if (!generated.empty() &&
      std::find(options.stop_ids.begin(), options.stop_ids.end(), generated.back()) != options.stop_ids.end()) {
    generated.pop_back();
  }
  return generated;
}

std::vector<int64_t> generate(Transformer& model, const std::vector<int64_t>& prompt_ids, const GenerateOptions& o) {
  if (prompt_ids.empty()) throw Error("generate: the prompt is empty", "give at least one token (e.g. BOS)");
  if (o.max_new_tokens < 0) throw ConfigError("max_new_tokens must be >= 0");
  for (int64_t id : prompt_ids) {
    if (id < 0 || id >= model.args().vocab_size) {
      throw Error("generate: prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                  std::to_string(model.args().vocab_size) + ")");
    }
  }
  EvalModeGuard eval_mode(model);
  at::NoGradGuard no_grad;
  const at::Device device = model.parameters().front().device();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  KVCache cache;
  std::vector<int64_t> out;
  std::vector<int64_t> all = prompt_ids;
  // longrope (phi3): the cached keys were rotated with the short factors; once the sequence outgrows the original
  // context, every position is recomputed with the long ones (transformers' Phi3 prepare_inputs_for_generation).
  const auto& rope = model.args().rope_scaling;
  const int64_t switch_at = rope.type == "longrope" ? rope.original_max_position_embeddings : 0;
  at::Tensor input = at::tensor(prompt_ids, at::kLong).unsqueeze(0).to(device);  // I64 [1, T]
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    if (switch_at > 0 && cache.length > 0 && cache.length <= switch_at &&
        static_cast<int64_t>(all.size()) >= switch_at + 1) {
      cache = KVCache();
      input = at::tensor(all, at::kLong).unsqueeze(0).to(device);
    }
    at::Tensor logits = model.forward(input, {}, {}, &cache);  // [1, T, V]
    const int64_t next = sample_next(logits[0][-1], o, gen);
    out.push_back(next);
    all.push_back(next);
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), next) != o.stop_ids.end()) break;
    input = at::full({1, 1}, next, at::TensorOptions().dtype(at::kLong).device(device));
  }
  return out;
}

}  // namespace ft::model
