// A tokenized dataset: JSON Lines sources rendered, tokenized and cached on disk as memory-mapped arrays, plus
// pretokenized binary sources mapped in place.
//
// Cache: one entry per source under cache_dir/<key>/ (tokens.bin I32, loss.bin U8, offsets.bin I64 [N+1],
// meta.json), keyed by a hash of the source (contents, or path+size+mtime above 256 MiB), the tokenizer fingerprint,
// format, template, seq_len, fields, flags and a format version. Several processes (ranks) may build at once: each
// takes an exclusive flock on cache_dir/<key>.lock; the first tokenizes into a temporary directory and renames it
// into place, the others wait on the lock (no collective is involved, so no collective timeout can fire) and load it.
//
// Weights: per epoch, a source with weight w contributes round(w * n) samples: floor(w) full copies of its n
// samples, plus an evenly strided subset for the fraction (w = 0.5 keeps every other sample, w = 2 repeats each
// sample twice). The sampler shuffles the combined list.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/batch_source.h"
#include "data/records.h"

namespace ft::io {
class MappedFile;
}

namespace ft::tok {
class Tokenizer;
}
namespace ft::chat {
class JinjaChat;
}
namespace ft::data {

struct DatasetOptions {
  std::vector<DataSource> sources;            // files with format and weight
  DataFields fields;                          // JSON field names
  std::string template_name = "plain";        // chat template: a built-in name, or auto (the model's own)
  std::filesystem::path model_dir;            // auto: where the model's chat template is looked for
  bool last_turn_only = false;                // chat with the model's template: loss on the last assistant turn
  std::shared_ptr<const chat::JinjaChat> chat;  // set by build() when auto finds the model's template
  std::map<std::string, std::string> roles;   // chat: dataset role name -> system|user|assistant|tool (data.roles)
  std::string system_prompt;                  // chat: system message for conversations without one
  int64_t seq_len = 512;                      // the longest sample kept (tokens); pretokenized row length
  Overlong overlong = Overlong::kTruncate;              // samples longer than seq_len
  OnError on_error = OnError::kFail;                    // a bad line
  TokenDType pretokenized_dtype = TokenDType::kUint16;  // pretokenized files' token width
  bool add_bos = true;
  bool add_eos = true;
  std::filesystem::path cache_dir;  // required for JSON Lines sources
  std::filesystem::path base_dir;   // relative source paths are resolved against it (the config's folder)

  // data.train (eval = false) or data.eval of a config; cache_dir falls back to default_cache_dir.
  static DatasetOptions from_config(const Config& config, bool eval, const std::filesystem::path& base_dir = {});
  // How the records of `source` are parsed: its format with these fields, template, roles and BOS/EOS settings (the
  // plain template while template_name is still auto, i.e. the model has none).
  RecordOptions record_options(const DataSource& source) const;
};

// The data cache when data.cache_dir is empty: a per-user cache shared by runs and sweeps (entries are keyed by
// content), $XDG_CACHE_HOME/finetune/data, else $HOME/.cache/finetune/data (the XDG default); without either (an
// absolute path), <run_dir>/.cache/data.
std::filesystem::path default_cache_dir(const std::filesystem::path& run_dir);

struct SourceStats {
  std::string path;
  std::string format;
  double weight = 1.0;
  int64_t samples = 0;                 // kept samples (before weighting)
  int64_t tokens = 0;                  // tokens of the kept samples
  int64_t target_tokens = 0;           // tokens carrying loss
  int64_t truncated = 0;               // samples kept, cut to seq_len
  int64_t dropped = 0;                 // samples dropped: overlong with overlong=drop, or no target token left
  int64_t skipped = 0;                 // bad lines skipped (on_error=skip)
  std::vector<int64_t> skipped_lines;  // the first few skipped line numbers
  bool from_cache = false;             // loaded from an existing cache entry (not tokenized in this call)
  std::string content;  // what the samples were made from: SourceKeys::content (not in meta.json); pretokenized: ""
};
// The cache entry's meta.json: every field but from_cache, all required when read (integers checked: a damaged
// file must not convert out of range).
void to_json(nlohmann::json& j, const SourceStats& s);
void from_json(const nlohmann::json& j, SourceStats& s);

struct DatasetStats {
  std::vector<SourceStats> sources;
  int64_t samples = 0, tokens = 0, target_tokens = 0, truncated = 0, dropped = 0, skipped = 0;
  int64_t epoch_samples = 0;  // samples per epoch after weighting
  nlohmann::json to_json() const;
};

class TokenizedDataset final : public BatchSource {
 public:
  // Builds (or loads from the cache) every source. Throws ft::Error on bad input (file:line and field) unless
  // on_error is skip, and when no sample is left.
  static std::shared_ptr<const TokenizedDataset> build(const DatasetOptions& options, const tok::Tokenizer& tokenizer);
  ~TokenizedDataset() override;
  TokenizedDataset(const TokenizedDataset&) = delete;
  TokenizedDataset& operator=(const TokenizedDataset&) = delete;

  // Samples per epoch after weighting.
  int64_t size() const override { return size_; }
  // Tokens of sample i (0 <= i < size()).
  int64_t length(int64_t i) const override;
  // Copies sample i: token ids, and per token 1 when it is a training target.
  void get(int64_t i, std::vector<int32_t>& tokens, std::vector<uint8_t>& loss) const;
  int64_t seq_len() const override { return seq_len_; }
  // collate() of data/loader.h over these samples.
  Batch collate(const RowPlan& rows, const CollateOptions& options) const override;
  const DatasetStats& stats() const { return stats_; }

  struct Part;  // one source (defined in dataset.cpp)

 private:
  TokenizedDataset() = default;
  std::pair<const Part*, int64_t> locate(int64_t i) const;

  std::vector<std::unique_ptr<Part>> parts_;
  std::vector<int64_t> part_begin_;  // weighted index where each part starts, plus the total
  int64_t size_ = 0;
  int64_t seq_len_ = 0;
  DatasetStats stats_;
};

// A prompt and its reference completion, for exact-match evaluation.
struct PromptCompletion {
  std::string prompt;  // as the model sees it (alpaca: rendered with the alpaca layout)
  std::string completion;
};

// The first `max_samples` records of the prompt_completion / alpaca sources (other formats are passed over),
// read with the same rules as the dataset: a bad record throws ft::Error (file:line, field) under OnError::kFail and
// is passed over under kSkip (the dataset's own read of the file reports it).
std::vector<PromptCompletion> load_prompt_completions(const std::vector<DataSource>& sources, const DataFields& fields,
                                                      int64_t max_samples, OnError on_error);

// The prompt ids exactly as a prompt_completion sample starts in training: [BOS] + encode(prompt).
std::vector<int64_t> encode_prompt(const tok::Tokenizer& tokenizer, std::string_view prompt, bool add_bos);

}  // namespace ft::data
