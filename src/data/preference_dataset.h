// Preference pairs as the training loop's data (a BatchSource): every source of format preference read and
// tokenized in the TRL style of the run's objective (data/preference.h), weighted as SFT sources are, and batched by
// collate_preference. A pair is one item, so train.micro_batch_size counts pairs; with packing, a row holds pairs up
// to twice data.seq_len tokens and a micro-batch's rows go through the model as one packed row.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "config/config.h"
#include "data/batch_source.h"
#include "data/preference.h"

namespace ft::tok {
class Tokenizer;
}
namespace ft::chat {
class JinjaChat;
}
namespace ft::data {

// The chat template conversational pairs render with: the model's own (model.path, else beside the tokenizer
// file), else data.template's built-in; null when data.template is auto and the model has none (a conversational
// record then fails, naming the fix).
std::shared_ptr<const chat::JinjaChat> preference_chat(const Config& cfg, const tok::Tokenizer& tokenizer);

// The run's PreferenceOptions: TRL's tokenization for train.objective (dpo, ipo: DPOTrainer; simpo, orpo:
// CPOTrainer/ORPOTrainer), data.seq_len as max_length, preference.truncation, data.fields' prompt/chosen/rejected
// and message keys, data.roles, tokenizer.add_bos, and `chat` (which must outlive the options).
PreferenceOptions preference_options(const Config& cfg, const chat::JinjaChat* chat);

class PreferenceDataset final : public BatchSource {
 public:
  // Reads every source (weights as TokenizedDataset's). Throws ft::Error for a missing file, a bad record
  // (file:line, field) unless data.on_error is skip, and when no pair is left.
  static std::shared_ptr<PreferenceDataset> build(const std::vector<DataSource>& sources,
                                                  const PreferenceOptions& options, OnError on_error,
                                                  const tok::Tokenizer& tokenizer);

  int64_t size() const override { return static_cast<int64_t>(index_.size()); }
  int64_t length(int64_t i) const override;  // chosen + rejected tokens
  int64_t seq_len() const override { return 2 * max_length_; }
  // The pairs of every row, in order, as one collate_preference batch (one packed row when options.packing).
  // Unpacked rows hold one sequence each: padded to a multiple of options.pad_multiple, at most max_length.
  Batch collate(const RowPlan& rows, const CollateOptions& options) const override;

  const PreferencePair& pair(int64_t i) const;

  // The distinct pairs (items without the weighting's repeats), numbered 0..distinct_pairs()-1 in file order.
  int64_t distinct_pairs() const { return static_cast<int64_t>(pairs_.size()); }
  const PreferencePair& distinct_pair(int64_t id) const;
  // Distinct pairs `ids` as one collate_preference batch with one pair per row (the reference pass's batches).
  Batch collate_distinct(const std::vector<int64_t>& ids, const CollateOptions& options) const;
  // F32 [distinct_pairs(), 2]: the reference model's completion log-probs of each pair's chosen and rejected
  // sequence. From then on every batch carries its pairs' values (PairLayout::reference_logps). Call it before a
  // loader draws batches.
  void set_reference_logps(at::Tensor table);
  // {"pairs", "tokens", "completion_tokens", "skipped", "sources": [{"path", "pairs", "weight"}]}
  const nlohmann::json& stats() const { return stats_; }

 private:
  PreferenceDataset() = default;

  std::vector<PreferencePair> pairs_;  // every source's pairs, in file order
  std::vector<int64_t> index_;         // weighted item -> pair
  at::Tensor reference_logps_;         // F32 [pairs_.size(), 2], or undefined
  int64_t max_length_ = 0;
  nlohmann::json stats_;
};

}  // namespace ft::data
