#include "data/preference_dataset.h"

#include <filesystem>

#include "chat/chat_template.h"
#include "chat/templates.h"
#include "data/dataset.h"
#include "data/preference_batch.h"
#include "data/sampler.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::data {

std::shared_ptr<const chat::JinjaChat> preference_chat(const Config& cfg, const tok::Tokenizer& tokenizer) {
  const std::string name = name_of(cfg.data.template_name);
  if (name == "auto") {
    const auto source = chat::find_model_chat_template(cfg.model.path, tokenizer);
    return source ? std::make_shared<chat::JinjaChat>(*source, tokenizer) : nullptr;
  }
  const std::string resolved = chat::resolve_template(name, tokenizer);
  FT_LOG_INFO("chat template: built-in {}", resolved);
  return std::make_shared<chat::JinjaChat>(
      chat::ChatTemplateSource{chat::chat_template_jinja(resolved), "built-in " + resolved}, tokenizer);
}

PreferenceOptions preference_options(const Config& cfg, const chat::JinjaChat* chat) {
  PreferenceOptions o;
  const auto objective = cfg.train.objective;
  o.style = objective == TrainObjective::kSimpo || objective == TrainObjective::kOrpo ? PreferenceStyle::kCpoOrpo
                                                                                      : PreferenceStyle::kDpo;
  o.max_length = cfg.data.seq_len;
  o.truncation = cfg.preference.truncation == PairTruncation::kKeepEnd ? PreferenceTruncation::kKeepEnd
                                                                       : PreferenceTruncation::kKeepStart;
  o.prompt_field = cfg.data.fields.prompt;
  o.chosen_field = cfg.data.fields.chosen;
  o.rejected_field = cfg.data.fields.rejected;
  o.fields = cfg.data.fields;
  o.roles = DatasetOptions::from_config(cfg, /*eval=*/false).roles;
  o.chat = chat;
  o.add_bos = cfg.tokenizer.add_bos;
  return o;
}

std::shared_ptr<PreferenceDataset> PreferenceDataset::build(const std::vector<DataSource>& sources,
                                                            const PreferenceOptions& options, OnError on_error,
                                                            const tok::Tokenizer& tokenizer) {
  if (sources.empty()) throw ConfigError("no data sources", "list files under data.train (path, format, weight)");
  std::shared_ptr<PreferenceDataset> ds(new PreferenceDataset());
  ds->max_length_ = options.max_length;
  nlohmann::json per_source = nlohmann::json::array();
  int64_t skipped = 0;
  for (const auto& src : sources) {
    if (!std::filesystem::is_regular_file(src.path)) {
      throw Error("data file not found: " + src.path,
                  "check data.train/data.eval paths (relative paths are relative to the config file)");
    }
    PreferenceData data = read_preference_file(src.path, options, tokenizer, on_error);
    const auto first = static_cast<int64_t>(ds->pairs_.size());
    const auto items = WeightedItems::of(src.weight, static_cast<int64_t>(data.pairs.size()), src.path);
    for (int64_t j = 0; j < items.weighted; ++j) ds->index_.push_back(first + items.item(j));
    for (auto& pair : data.pairs) ds->pairs_.push_back(std::move(pair));
    skipped += data.skipped;
    per_source.push_back({{"path", src.path}, {"pairs", items.n}, {"weight", src.weight}});
  }
  int64_t tokens = 0, completion = 0;
  for (const auto& p : ds->pairs_) {
    tokens += static_cast<int64_t>(p.chosen.tokens.size() + p.rejected.tokens.size());
    for (const auto* seq : {&p.chosen, &p.rejected}) {
      for (uint8_t scored : seq->loss) completion += scored;
    }
  }
  ds->stats_ = {{"pairs", static_cast<int64_t>(ds->pairs_.size())},
                {"tokens", tokens},
                {"completion_tokens", completion},
                {"skipped", skipped},
                {"sources", per_source}};
  if (ds->index_.empty()) {
    throw Error(fmt::format("the preference data has no pairs ({} skipped)", skipped),
                "check the data files, their weights and data.seq_len (a pair whose prompt fills it keeps no "
                "completion token)");
  }
  return ds;
}

const PreferencePair& PreferenceDataset::pair(int64_t i) const {
  FT_CHECK(i >= 0 && i < size(), fmt::format("pair index {} outside [0, {})", i, size()));
  return pairs_[static_cast<size_t>(index_[static_cast<size_t>(i)])];
}

int64_t PreferenceDataset::length(int64_t i) const {
  const auto& p = pair(i);
  return static_cast<int64_t>(p.chosen.tokens.size() + p.rejected.tokens.size());
}

Batch PreferenceDataset::collate(const RowPlan& rows, const CollateOptions& options) const {
  std::vector<int64_t> ids;
  for (const auto& row : rows) {
    for (int64_t i : row) {
      FT_CHECK(i >= 0 && i < size(), fmt::format("pair index {} outside [0, {})", i, size()));
      ids.push_back(index_[static_cast<size_t>(i)]);
    }
  }
  Batch batch = collate_distinct(ids, options);
  if (reference_logps_.defined()) {
    // F32 [2P]: the chosen sequences' values, then the rejected ones', as the batch orders its sequences.
    const at::Tensor rows_of = at::tensor(ids, at::kLong);
    const at::Tensor picked = reference_logps_.index_select(0, rows_of);  // F32 [P, 2]
    batch.pairs->reference_logps = picked.t().reshape({-1});
    if (options.pin_memory) batch.pairs->reference_logps = batch.pairs->reference_logps.pin_memory();
  }
  return batch;
}

const PreferencePair& PreferenceDataset::distinct_pair(int64_t id) const {
  FT_CHECK(id >= 0 && id < distinct_pairs(), fmt::format("pair {} outside [0, {})", id, distinct_pairs()));
  return pairs_[static_cast<size_t>(id)];
}

Batch PreferenceDataset::collate_distinct(const std::vector<int64_t>& ids, const CollateOptions& options) const {
  std::vector<const PreferencePair*> pairs;
  pairs.reserve(ids.size());
  for (int64_t id : ids) pairs.push_back(&distinct_pair(id));
  CollateOptions o = options;
  o.seq_len = max_length_;  // options.seq_len is the packed row, two sequences long
  return collate_preference(pairs, o);
}

void PreferenceDataset::set_reference_logps(at::Tensor table) {
  FT_CHECK(table.dim() == 2 && table.size(0) == distinct_pairs() && table.size(1) == 2,
           fmt::format("reference log-probs of shape {} for {} pairs", table.sizes().vec(), distinct_pairs()));
  reference_logps_ = table.to(at::kCPU, at::kFloat).contiguous();
}

}  // namespace ft::data
