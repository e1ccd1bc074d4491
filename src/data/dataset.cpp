#include "data/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <utility>
#include <vector>

#include "chat/chat_template.h"
#include "data/dataset_cache.h"
#include "data/sampler.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/fmt.h"
#include "util/hash.h"
#include "util/json_int.h"
#include "util/parallel.h"

namespace ft::data {

// One source: a cache entry (JSON Lines) or a pretokenized file split into seq_len rows.
struct TokenizedDataset::Part {
  CachedSource cached;                  // JSON Lines sources
  std::shared_ptr<io::MappedFile> raw;  // pretokenized: U16 or U32 tokens, mapped in place
  int64_t raw_width = 0;                // bytes per pretokenized token
  int64_t seq_len = 0;
  WeightedItems items;  // the source's samples and its samples per epoch

  const int64_t* offsets() const { return reinterpret_cast<const int64_t*>(cached.offsets->data()); }
  int64_t length(int64_t s) const { return raw ? seq_len : offsets()[s + 1] - offsets()[s]; }
};

namespace {

// Token i of a pretokenized file's bytes: U16 (width 2) or U32 (width 4), little-endian as written, unaligned.
uint32_t raw_token(const std::uint8_t* data, int64_t i, int64_t width) {
  if (width == 2) {
    uint16_t x = 0;
    std::memcpy(&x, data + i * 2, 2);
    return x;
  }
  uint32_t v = 0;
  std::memcpy(&v, data + i * 4, 4);
  return v;
}

// The first token of a pretokenized file (`width` bytes each) at or past `vocab_size`, as (index, id); every token is
// read once, in chunks on every core, so a bad id stops the run at its start rather than when its row is drawn.
std::optional<std::pair<int64_t, uint32_t>> first_out_of_vocabulary(const std::uint8_t* data, int64_t n_tokens,
                                                                    int64_t width, int64_t vocab_size) {
  constexpr int64_t kChunk = int64_t{1} << 24;
  const int64_t chunks = (n_tokens + kChunk - 1) / kChunk;
  std::vector<std::optional<std::pair<int64_t, uint32_t>>> found(static_cast<size_t>(chunks));
  parallel_tasks(chunks, [&](int64_t c) {
    const int64_t end = std::min(n_tokens, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) {
      const uint32_t v = raw_token(data, i, width);
      if (static_cast<int64_t>(v) >= vocab_size) {
        found[static_cast<size_t>(c)] = std::make_pair(i, v);
        return;
      }
    }
  });
  for (const auto& f : found) {
    if (f) return f;
  }
  return std::nullopt;
}

// Refuses a pretokenized file with an id past `vocab_size`. The verdict is kept in the data cache (a marker named by
// the file's path, size and time, the width and the vocabulary size), so a file of billions of tokens is read once,
// not at every start of every rank; without a cache directory it is read each time.
void check_vocabulary_once(const io::MappedFile& file, int64_t width, int64_t vocab_size,
                           const std::filesystem::path& cache_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto mtime = fs::last_write_time(file.path(), ec).time_since_epoch().count();
  const fs::path marker = cache_dir.empty()
                              ? fs::path()
                              : cache_dir / "pretokenized-checked" /
                                    hex64(hash_string(fmt::format("{}|{}|{}|{}|{}", fs::absolute(file.path()).string(),
                                                                  file.size(), mtime, width, vocab_size)));
  if (!marker.empty() && fs::exists(marker, ec)) return;
  const int64_t n_tokens = static_cast<int64_t>(file.size()) / width;
  if (const auto bad = first_out_of_vocabulary(file.data(), n_tokens, width, vocab_size)) {
    throw Error(fmt::format("{}: token {} at index {} is outside the tokenizer's vocabulary ({})", file.path().string(),
                            bad->second, bad->first, vocab_size),
                "the file was written with another tokenizer, or data.pretokenized_dtype is wrong");
  }
  if (marker.empty()) return;
  fs::create_directories(marker.parent_path(), ec);
  std::ofstream(marker) << file.path().string() << "\n";  // best effort: without it the next start reads again
}

std::unique_ptr<TokenizedDataset::Part> open_pretokenized(const std::filesystem::path& path, const DataSource& src,
                                                          const DatasetOptions& o, const tok::Tokenizer& tok,
                                                          SourceStats& st) {
  auto part = std::make_unique<TokenizedDataset::Part>();
  part->raw_width = o.pretokenized_dtype == TokenDType::kUint16 ? 2 : 4;
  part->raw = io::MappedFile::open(path);
  const auto bytes = static_cast<int64_t>(part->raw->size());
  if (bytes == 0) throw Error(path.string() + ": the file is empty (no tokens)", "check the data path");
  if (bytes % part->raw_width != 0) {
    throw Error(
        fmt::format("{}: {} bytes is not a whole number of {} tokens", path.string(), bytes,
                    name_of(o.pretokenized_dtype)),
        "check data.pretokenized_dtype (nanoGPT writes uint16, llm.c files have a header: strip it)");
  }
  const int64_t n_tokens = bytes / part->raw_width;
  check_vocabulary_once(*part->raw, part->raw_width, tok.vocab_size(), o.cache_dir);
  part->seq_len = o.seq_len;
  part->items.n = n_tokens / o.seq_len;
  st.path = path.string();
  st.format = name_of(src.format);
  st.weight = src.weight;
  st.samples = part->items.n;
  st.tokens = part->items.n * o.seq_len;
  st.target_tokens = part->items.n * (o.seq_len - 1);
  st.dropped = n_tokens % o.seq_len > 0 ? 1 : 0;  // the tail shorter than a row
  return part;
}

}  // namespace

TokenizedDataset::~TokenizedDataset() = default;

std::filesystem::path default_cache_dir(const std::filesystem::path& run_dir) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg == '/') return std::filesystem::path(xdg) / "finetune" / "data";
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home == '/') return std::filesystem::path(home) / ".cache" / "finetune" / "data";
  return run_dir / ".cache" / "data";
}

RecordOptions DatasetOptions::record_options(const DataSource& source) const {
  RecordOptions ro;
  ro.format = source.format;
  ro.fields = fields;
  ro.template_name = template_name == "auto" ? "plain" : template_name;  // auto without a model template
  ro.chat = chat.get();
  ro.last_turn_only = last_turn_only;
  ro.roles = roles;
  ro.system_prompt = system_prompt;
  ro.add_bos = add_bos;
  ro.add_eos = add_eos;
  return ro;
}

DatasetOptions DatasetOptions::from_config(const Config& config, bool eval, const std::filesystem::path& base_dir) {
  DatasetOptions o;
  const auto& d = config.data;
  o.sources = eval ? d.eval : d.train;
  o.fields = d.fields;
  o.template_name = name_of(d.template_name);
  o.model_dir = config.model.path;
  o.last_turn_only = d.train_on == TrainOn::kLast;
  for (const std::string& entry : d.roles) {  // name=role, checked by the config validation
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) o.roles[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  o.system_prompt = d.system_prompt;
  o.seq_len = d.seq_len;
  o.overlong = d.overlong;
  o.on_error = d.on_error;
  o.pretokenized_dtype = d.pretokenized_dtype;
  o.add_bos = config.tokenizer.add_bos;
  o.add_eos = config.tokenizer.add_eos;
  o.base_dir = base_dir;
  o.cache_dir = d.cache_dir.empty() ? default_cache_dir(config.run.output_dir) : std::filesystem::path(d.cache_dir);
  if (o.cache_dir.is_relative() && !base_dir.empty() && !d.cache_dir.empty()) o.cache_dir = base_dir / o.cache_dir;
  return o;
}

std::shared_ptr<const TokenizedDataset> TokenizedDataset::build(const DatasetOptions& o, const tok::Tokenizer& tok) {
  if (o.sources.empty()) throw ConfigError("no data sources", "list files under data.train (path, format, weight)");
  if (o.seq_len < 2) throw ConfigError(fmt::format("data.seq_len must be at least 2, got {}", o.seq_len));
  chat::check_template_name(o.template_name);
  if (o.template_name == "auto" && !o.chat) {
    // The model's own template, or the plain built-in.
    if (auto source = chat::find_model_chat_template(o.model_dir, tok)) {
      DatasetOptions with_chat = o;
      with_chat.chat = std::make_shared<chat::JinjaChat>(*source, tok);
      return build(with_chat, tok);
    }
  }
  const bool has_chat = std::any_of(o.sources.begin(), o.sources.end(),
                                    [](const DataSource& src) { return src.format == Format::kChat; });
  if (has_chat && !o.chat) {
    // A family name (mistral) becomes the variant the tokenizer needs (mistral-v1, mistral-v3, mistral-tekken).
    if (std::string variant = chat::resolve_template(o.template_name, tok); variant != o.template_name) {
      DatasetOptions resolved = o;
      resolved.template_name = std::move(variant);
      FT_LOG_INFO("chat template: built-in {} (data.template {})", resolved.template_name, o.template_name);
      return build(resolved, tok);
    }
    chat::check_template_markers(o.template_name, tok);
    if (o.template_name == "auto") {
      FT_LOG_WARN("chat template: plain (data.template is auto, and neither model.path nor the tokenizer's folder has "
                  "a chat template); set data.template to a built-in (e.g. chatml, llama3) to train in another format");
    } else {
      FT_LOG_INFO("chat template: built-in {}", o.template_name);
    }
  }
  std::shared_ptr<TokenizedDataset> ds(new TokenizedDataset());
  ds->seq_len_ = o.seq_len;
  ds->part_begin_.push_back(0);
  for (const auto& src : o.sources) {
    const Format format = src.format;
    if (!(src.weight >= 0.0) || !std::isfinite(src.weight)) {
      throw ConfigError(fmt::format("data source {}: weight must be a finite number >= 0", src.path));
    }
    if (src.path.empty()) {
      throw ConfigError(
          "a data source has no path (nothing was generated for it: data.synth.train_samples or "
          "eval_samples is 0)",
          "set its path, or a positive sample count for data.synth to generate it");
    }
    std::filesystem::path path = src.path;
    if (path.is_relative() && !o.base_dir.empty()) path = o.base_dir / path;
    if (!std::filesystem::is_regular_file(path)) {
      throw Error("data file not found: " + path.string(),
                  "check data.train/data.eval paths (relative paths are "
                  "relative to the config file)");
    }
    std::unique_ptr<Part> part;
    SourceStats st;
    if (format == Format::kPretokenized) {
      part = open_pretokenized(path, src, o, tok, st);
    } else {
      part = std::make_unique<Part>();
      part->cached = load_or_build_source(path, src, o, tok);
      st = part->cached.stats;
      st.weight = src.weight;  // the entry's meta.json has the weight of the run that built it
      part->items.n = st.samples;
    }
    part->items = WeightedItems::of(src.weight, part->items.n, src.path);
    ds->size_ += part->items.weighted;
    ds->part_begin_.push_back(ds->size_);
    auto& total = ds->stats_;
    total.samples += st.samples;
    total.tokens += st.tokens;
    total.target_tokens += st.target_tokens;
    total.truncated += st.truncated;
    total.dropped += st.dropped;
    total.skipped += st.skipped;
    total.sources.push_back(std::move(st));
    ds->parts_.push_back(std::move(part));
  }
  ds->stats_.epoch_samples = ds->size_;
  if (ds->size_ == 0) {
    std::vector<std::string> per_source;
    for (const SourceStats& st : ds->stats_.sources) {
      per_source.push_back(fmt::format(
          "{}: {} dropped, {} bad line(s) skipped{}", st.path, st.dropped, st.skipped,
          st.skipped_lines.empty() ? "" : fmt::format(" (first at line(s) {})", fmt::join(st.skipped_lines, ", "))));
    }
    throw Error(fmt::format("the dataset has no samples ({})", fmt::join(per_source, "; ")),
                "samples without a target token are dropped (an empty completion without EOS, a chat without an "
                "assistant turn, a prompt that fills data.seq_len); under data.on_error: skip, set it to fail to see "
                "the first bad line's error");
  }
  return ds;
}

std::pair<const TokenizedDataset::Part*, int64_t> TokenizedDataset::locate(int64_t i) const {
  FT_CHECK(i >= 0 && i < size_, fmt::format("sample index {} outside [0, {})", i, size_));
  const auto it = std::upper_bound(part_begin_.begin(), part_begin_.end(), i);
  const auto p = static_cast<size_t>(it - part_begin_.begin() - 1);
  const Part* part = parts_[p].get();
  return {part, part->items.item(i - part_begin_[p])};
}

int64_t TokenizedDataset::length(int64_t i) const {
  const auto [part, s] = locate(i);
  return part->length(s);
}

void TokenizedDataset::get(int64_t i, std::vector<int32_t>& tokens, std::vector<uint8_t>& loss) const {
  const auto [part, s] = locate(i);
  const int64_t len = part->length(s);
  tokens.resize(static_cast<size_t>(len));
  loss.assign(static_cast<size_t>(len), 1);
  if (part->raw) {
    const std::uint8_t* base = part->raw->data() + s * part->seq_len * part->raw_width;
    for (int64_t t = 0; t < len; ++t) {
      // below the vocabulary size: checked at open
      tokens[static_cast<size_t>(t)] = static_cast<int32_t>(raw_token(base, t, part->raw_width));
    }
    loss[0] = 0;
    return;
  }
  const int64_t begin = part->offsets()[s];
  std::memcpy(tokens.data(), part->cached.tokens->data() + begin * 4, static_cast<size_t>(len) * 4);
  std::memcpy(loss.data(), part->cached.loss->data() + begin, static_cast<size_t>(len));
}

void to_json(nlohmann::json& j, const SourceStats& s) {
  j = {{"path", s.path},           {"format", s.format},
       {"weight", s.weight},       {"samples", s.samples},
       {"tokens", s.tokens},       {"target_tokens", s.target_tokens},
       {"truncated", s.truncated}, {"dropped", s.dropped},
       {"skipped", s.skipped},     {"skipped_lines", s.skipped_lines}};
}

void from_json(const nlohmann::json& j, SourceStats& s) {
  j.at("path").get_to(s.path);
  j.at("format").get_to(s.format);
  j.at("weight").get_to(s.weight);
  s.samples = json_integer_at<int64_t>(j, "samples");
  s.tokens = json_integer_at<int64_t>(j, "tokens");
  s.target_tokens = json_integer_at<int64_t>(j, "target_tokens");
  s.truncated = json_integer_at<int64_t>(j, "truncated");
  s.dropped = json_integer_at<int64_t>(j, "dropped");
  s.skipped = json_integer_at<int64_t>(j, "skipped");
  s.skipped_lines.clear();
  for (const auto& line : j.at("skipped_lines").get<std::vector<nlohmann::json>>()) {
    s.skipped_lines.push_back(json_integer<int64_t>(line, "skipped_lines"));
  }
}

nlohmann::json DatasetStats::to_json() const {
  nlohmann::json j = {
      {"samples", samples}, {"tokens", tokens},   {"target_tokens", target_tokens}, {"truncated", truncated},
      {"dropped", dropped}, {"skipped", skipped}, {"epoch_samples", epoch_samples}};
  j["sources"] = nlohmann::json::array();
  for (const auto& s : sources) {
    nlohmann::json sj = s;
    sj["from_cache"] = s.from_cache;
    j["sources"].push_back(sj);
  }
  return j;
}

}  // namespace ft::data
