#include "model/generate.h"

#include <algorithm>
#include <numeric>

#include "model/mode_guards.h"
#include "util/error.h"

namespace ft::model {
namespace {

// The prefill of one batch runs every prompt position through the layers: rows are added to a batch while its widest
// activation (the MLP's, [rows, longest prompt, intermediate]) stays within this many elements (1 GiB in F32).
constexpr int64_t kPrefillActivations = int64_t{1} << 28;

// What generate() refuses, in its order: an empty prompt, a negative max_new_tokens, ids outside the vocabulary.
void check_request(const Transformer& model, const std::vector<int64_t>& prompt_ids, const GenerateOptions& o) {
  if (prompt_ids.empty()) throw Error("generate: the prompt is empty", "give at least one token (e.g. BOS)");
  if (o.max_new_tokens < 0) throw ConfigError("max_new_tokens must be >= 0");
  for (int64_t id : prompt_ids) {
    if (id < 0 || id >= model.args().vocab_size) {
      throw Error("generate: prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                  std::to_string(model.args().vocab_size) + ")");
    }
  }
}

bool is_stop(const GenerateOptions& o, int64_t id) {
  return std::find(o.stop_ids.begin(), o.stop_ids.end(), id) != o.stop_ids.end();
}

// The batches of generate_batch as indices into `prompts`: shortest first (little padding), each at most `max_rows`
// rows and kPrefillActivations elements of a `width`-wide activation, at least one row.
std::vector<std::vector<size_t>> row_batches(const std::vector<std::vector<int64_t>>& prompts, int64_t max_rows,
                                             int64_t width) {
  std::vector<size_t> order(prompts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return prompts[a].size() < prompts[b].size(); });
  std::vector<std::vector<size_t>> batches;
  for (size_t i : order) {
    const auto rows = batches.empty() ? max_rows : static_cast<int64_t>(batches.back().size());
    const auto elements = (rows + 1) * static_cast<int64_t>(prompts[i].size()) * width;  // longest last
    if (rows >= max_rows || elements > kPrefillActivations) batches.emplace_back();
    batches.back().push_back(i);
  }
  return batches;
}

// Greedy decoding of one batch of prompts, left-padded into I64 [B, P]: each row's real positions count from its
// first real token, and the cache's first_real hides the padding keys from the real queries.
std::vector<std::vector<int64_t>> greedy_rows(Transformer& model, const std::vector<const std::vector<int64_t>*>& rows,
                                              const GenerateOptions& o) {
  const auto b = static_cast<int64_t>(rows.size());
  int64_t p = 0;
  for (const auto* prompt : rows) p = std::max(p, static_cast<int64_t>(prompt->size()));
  std::vector<int64_t> ids(static_cast<size_t>(b * p), 0), first(rows.size());  // padding: id 0
  for (size_t r = 0; r < rows.size(); ++r) {
    first[r] = p - static_cast<int64_t>(rows[r]->size());
    std::copy(rows[r]->begin(), rows[r]->end(), ids.begin() + static_cast<int64_t>(r) * p + first[r]);
  }
  const at::Device device = model.parameters().front().device();
  const at::Tensor first_real = at::tensor(first, at::kLong).to(device);  // I64 [B]
  at::Tensor input = at::tensor(ids, at::kLong).view({b, p}).to(device);  // I64 [B, P]
  // Padding takes position 0: only the padding query itself sees it.
  at::Tensor positions = (at::arange(p, input.options()).unsqueeze(0) - first_real.unsqueeze(1)).clamp_min(0);
  KVCache cache;
  // Prompts of one length need no padding mask: they decode as generate() decodes one.
  if (std::any_of(first.begin(), first.end(), [](int64_t f) { return f > 0; })) cache.first_real = first_real;
  std::vector<std::vector<int64_t>> out(rows.size());
  std::vector<bool> done(rows.size(), false);
  int64_t running = b;
  for (int64_t step = 0; step < o.max_new_tokens && running > 0; ++step) {
    const at::Tensor next = model.last_logits(input, positions, &cache).argmax(-1);  // I64 [B]
    const at::Tensor host = next.cpu();
    const int64_t* picked = host.data_ptr<int64_t>();
    for (size_t r = 0; r < rows.size(); ++r) {
      if (done[r]) continue;
      out[r].push_back(picked[r]);
      if (is_stop(o, picked[r])) {
        done[r] = true;
        --running;
      }
    }
    input = next.view({b, 1});
    positions = (cache.length - first_real).view({b, 1});  // I64 [B, 1]
  }
  return out;
}

}  // namespace

int64_t sample_next(const at::Tensor& logits, const GenerateOptions& o, at::Generator& gen) {
  if (o.temperature <= 0.0) return logits.argmax().item<int64_t>();
  // F32 [V]; shifted so the largest is 0 first, so that a tiny temperature sends the others to -inf instead of
  // overflowing every score (softmax is the same for any shift).
  at::Tensor scores = logits.to(at::kFloat).cpu();
  scores = (scores - scores.max()) / o.temperature;
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
  if (!generated.empty() && is_stop(options, generated.back())) generated.pop_back();
  return generated;
}

std::vector<int64_t> generate(Transformer& model, const std::vector<int64_t>& prompt_ids, const GenerateOptions& o) {
  check_request(model, prompt_ids, o);
  EvalModeGuard eval_mode(model);
  at::NoGradGuard no_grad;
  NoCudnnAttentionGuard no_cudnn_attention;
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
    const int64_t next = sample_next(model.last_logits(input, {}, &cache)[0], o, gen);  // from [1, V]
    out.push_back(next);
    all.push_back(next);
    if (is_stop(o, next)) break;
    input = at::full({1, 1}, next, at::TensorOptions().dtype(at::kLong).device(device));
  }
  return out;
}

std::vector<std::vector<int64_t>> generate_batch(Transformer& model, const std::vector<std::vector<int64_t>>& prompts,
                                                 const GenerateOptions& o, int64_t max_rows) {
  if (o.temperature > 0.0) {
    throw ConfigError("generate_batch: sampling (temperature > 0) is not batched", "use generate() per prompt");
  }
  if (max_rows < 1) throw ConfigError("generate_batch: max_rows must be >= 1");
  for (const auto& prompt : prompts) check_request(model, prompt, o);
  std::vector<std::vector<int64_t>> out(prompts.size());
  if (model.args().rope_scaling.type == "longrope") {
    for (size_t i = 0; i < prompts.size(); ++i) out[i] = generate(model, prompts[i], o);
    return out;
  }
  EvalModeGuard eval_mode(model);
  at::NoGradGuard no_grad;
  NoCudnnAttentionGuard no_cudnn_attention;
  const int64_t width = std::max(model.args().hidden_size, model.args().intermediate_size);
  for (const auto& batch : row_batches(prompts, max_rows, width)) {
    std::vector<const std::vector<int64_t>*> rows;
    for (size_t i : batch) rows.push_back(&prompts[i]);
    auto generated = greedy_rows(model, rows, o);
    for (size_t r = 0; r < batch.size(); ++r) out[batch[r]] = std::move(generated[r]);
  }
  return out;
}

}  // namespace ft::model
