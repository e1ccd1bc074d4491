// collate_preference: the 2P sequences of P pairs as one batch, in collate's (loader.cpp) conventions.
#include "data/preference_batch.h"

#include <algorithm>

#include "util/error.h"
#include "util/fmt.h"

namespace ft::data {
namespace {

at::Tensor maybe_pinned(const at::Tensor& t, bool pin) {
  return pin ? t.pin_memory() : t;
}

// TRL's order: every pair's chosen sequence, then every pair's rejected one.
std::vector<const chat::TokenizedSample*> sequences_of(const std::vector<const PreferencePair*>& pairs) {
  std::vector<const chat::TokenizedSample*> out;
  for (const auto* p : pairs) out.push_back(&p->chosen);
  for (const auto* p : pairs) out.push_back(&p->rejected);
  return out;
}

}  // namespace

Batch collate_preference(const std::vector<const PreferencePair*>& pairs, bool packing, int64_t pad_id,
                         bool pin_memory) {
  return collate_preference(pairs, CollateOptions{/*seq_len=*/0, packing, pad_id, /*pad_multiple=*/1, pin_memory});
}

Batch collate_preference(const std::vector<const PreferencePair*>& pairs, const CollateOptions& options) {
  const auto& [cap, packing, pad_id, pad_multiple, pin_memory] = options;
  FT_CHECK(!pairs.empty(), "collate_preference needs at least one pair");
  const auto seqs = sequences_of(pairs);
  const auto S = static_cast<int64_t>(seqs.size());
  int64_t longest = 0, total = 0;
  for (const auto* s : seqs) {
    const auto len = static_cast<int64_t>(s->tokens.size());
    FT_CHECK(len > 0 && s->loss.size() == s->tokens.size(), "a preference sequence without tokens or mask");
    longest = std::max(longest, len);
    total += len;
  }
  const int64_t B = packing ? 1 : S;
  const int64_t T = packing ? total : padded_length(longest, pad_multiple, cap);
  const auto i64 = at::TensorOptions().dtype(at::kLong);
  at::Tensor input = at::full({B, T}, pad_id, i64);
  at::Tensor labels = at::full({B, T}, kIgnoreIndex, i64);
  at::Tensor pos = at::arange(T, i64).repeat({B, 1});  // padding keeps its column index, as collate does
  at::Tensor seq_ids = at::full({B, T}, -1, i64);
  at::Tensor completion = at::zeros({S}, i64);
  at::Tensor targets = at::zeros({S}, i64);
  int64_t* in_p = input.data_ptr<int64_t>();
  int64_t* lab_p = labels.data_ptr<int64_t>();
  int64_t* pos_p = pos.data_ptr<int64_t>();
  int64_t* seq_p = seq_ids.data_ptr<int64_t>();
  int64_t* comp_p = completion.data_ptr<int64_t>();
  int64_t* tgt_p = targets.data_ptr<int64_t>();
  std::vector<int32_t> cu_seqlens{0};
  int64_t offset = 0, n_targets = 0;  // packing: where the next sequence starts in the row
  for (int64_t s = 0; s < S; ++s) {
    const auto& tok = seqs[static_cast<size_t>(s)]->tokens;
    const auto& loss = seqs[static_cast<size_t>(s)]->loss;
    const auto len = static_cast<int64_t>(tok.size());
    const int64_t base = packing ? offset : s * T;
    for (int64_t t = 0; t < len; ++t) {
      const auto k = static_cast<size_t>(t);
      in_p[base + t] = tok[k];
      pos_p[base + t] = t;
      seq_p[base + t] = s;
      comp_p[s] += loss[k];
      if (t + 1 < len && loss[k + 1]) {  // the next token is a scored completion token
        lab_p[base + t] = tok[k + 1];
        ++tgt_p[s];
      }
    }
    FT_CHECK(comp_p[s] > 0, fmt::format("preference sequence {} has no completion token", s));
    n_targets += tgt_p[s];
    offset += len;
    cu_seqlens.push_back(static_cast<int32_t>(offset));
  }
  Batch b;
  b.input_ids = maybe_pinned(input, pin_memory);
  b.labels = maybe_pinned(labels, pin_memory);
  b.position_ids = maybe_pinned(pos, pin_memory);
  if (packing) {  // one segment per sequence: varlen attention keeps them apart
    b.segment_ids = maybe_pinned(seq_ids.to(at::kInt), pin_memory);
    b.cu_seqlens = maybe_pinned(at::tensor(cu_seqlens, at::TensorOptions().dtype(at::kInt)), pin_memory);
    b.max_seqlen = longest;
  }
  b.num_target_tokens = n_targets;
  b.num_samples = S;
  b.pairs = PairLayout{maybe_pinned(seq_ids, pin_memory), maybe_pinned(completion, pin_memory),
                       maybe_pinned(targets, pin_memory), static_cast<int64_t>(pairs.size()), at::Tensor()};
  return b;
}

}  // namespace ft::data
