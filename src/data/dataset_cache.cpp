#include "data/dataset_cache.h"
#include "util/fs.h"

#include <ATen/ATen.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "chat/chat_template.h"
#include "chat/templates.h"
#include "data/json_records.h"
#include "data/records.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/file_writer.h"
#include "util/fmt.h"

namespace ft::data {
namespace {

constexpr uintmax_t kContentHashLimit = 256ull << 20;  // bigger files are keyed by path, size and mtime

struct Writer {
  std::ofstream tokens, loss, offsets;
  int64_t total = 0;
  explicit Writer(const std::filesystem::path& dir)
      : tokens(dir / "tokens.bin", std::ios::binary),
        loss(dir / "loss.bin", std::ios::binary),
        offsets(dir / "offsets.bin", std::ios::binary) {
    write_offset();
  }
  void write_offset() { offsets.write(reinterpret_cast<const char*>(&total), sizeof(total)); }
  void add(const chat::TokenizedSample& s) {
    tokens.write(reinterpret_cast<const char*>(s.tokens.data()),
                 static_cast<std::streamsize>(s.tokens.size() * sizeof(int32_t)));
    loss.write(reinterpret_cast<const char*>(s.loss.data()), static_cast<std::streamsize>(s.loss.size()));
    total += static_cast<int64_t>(s.tokens.size());
    write_offset();
  }
  void close(const std::filesystem::path& dir) {
    for (auto* f : {&tokens, &loss, &offsets}) {
      f->flush();
      if (!*f) throw Error("cannot write the data cache in " + dir.string(), "check free disk space (data.cache_dir)");
      f->close();
    }
  }
};

// One record of a batch: its line, and its tokens or why it was skipped.
struct Item {
  int64_t line_no = 0;
  chat::TokenizedSample sample;
  std::optional<RecordError> error;
};

// Tokenizes a batch of records on every core. A RecordError stays with its record; any other error stops the run.
std::vector<Item> tokenize_batch(const std::vector<std::string>& lines, const std::vector<int64_t>& line_numbers,
                                 const RecordOptions& ro, const tok::Tokenizer& tokenizer) {
  const size_t threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<Item> items(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) items[i].line_no = line_numbers[i];
  std::vector<std::thread> pool;
  std::exception_ptr failure;
  std::mutex failure_mutex;
  for (size_t t = 0; t < std::min(threads, lines.size()); ++t) {
    pool.emplace_back([&, t] {
      try {
        for (size_t i = t; i < lines.size(); i += threads) {
          try {
            items[i].sample = tokenize_record(lines[i], ro, tokenizer);
          } catch (const RecordError& e) {
            items[i].error = e;
          }
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);
  return items;
}

// Fits a sample to seq_len (truncated or dropped, per data.overlong) and counts it in `st` once: as dropped, or as
// kept (and truncated where it was cut); false when it is dropped.
bool fit_sample(chat::TokenizedSample& s, const DatasetOptions& o, SourceStats& st) {
  if (!s.loss.empty()) s.loss[0] = 0;  // the first token has no prefix to be predicted from
  const bool overlong = static_cast<int64_t>(s.tokens.size()) > o.seq_len;
  if (overlong) {
    if (o.overlong == Overlong::kDrop) {
      ++st.dropped;
      return false;
    }
    s.tokens.resize(static_cast<size_t>(o.seq_len));
    s.loss.resize(static_cast<size_t>(o.seq_len));
  }
  int64_t targets = 0;
  for (uint8_t l : s.loss) targets += l;
  if (targets == 0) {  // e.g. a prompt that fills seq_len: nothing to learn from
    ++st.dropped;
    return false;
  }
  if (overlong) ++st.truncated;
  ++st.samples;
  st.tokens += static_cast<int64_t>(s.tokens.size());
  st.target_tokens += targets;
  return true;
}

// Tokenizes `path` into `dir` (tokens.bin, loss.bin, offsets.bin, meta.json).
SourceStats tokenize_source(const std::filesystem::path& path, const DataSource& source, const DatasetOptions& o,
                            const tok::Tokenizer& tokenizer, const std::filesystem::path& dir) {
  const RecordOptions ro = o.record_options(source);
  BadRecords bad(path, o.on_error);

  SourceStats st;
  st.path = path.string();
  st.format = name_of(source.format);
  st.weight = source.weight;
  RecordReader reader(path);
  Writer w(dir);
  // Lines are tokenized in batches on every core, then kept or counted in file order (so the cache and its
  // statistics do not depend on the thread count).
  constexpr size_t kBatch = 4096;
  std::vector<std::string> lines;
  std::vector<int64_t> line_numbers;
  int64_t line_no = 0;
  int64_t records = 0;
  auto process = [&] {
    for (auto& item : tokenize_batch(lines, line_numbers, ro, tokenizer)) {
      if (item.error) {
        bad.add(item.line_no, *item.error);
      } else if (fit_sample(item.sample, o, st)) {
        w.add(item.sample);
      }
    }
    lines.clear();
    line_numbers.clear();
  };
  std::string record;
  while (reader.next(record, line_no)) {
    ++records;
    lines.push_back(std::move(record));
    line_numbers.push_back(line_no);
    if (lines.size() == kBatch) {
      process();
    }
  }
  process();
  w.close(dir);
  bad.finish(records);
  // Warned where the dataset's statistics are logged, also when a later run reads this entry from the cache.
  st.skipped = bad.count();
  st.skipped_lines = bad.lines();
  ft::write_file_atomic(dir / "meta.json", nlohmann::json(st).dump(2));
  return st;
}

// Opens a cache entry and checks everything later reads trust: meta.json, the file sizes, offsets that stay inside
// tokens.bin, and token ids inside the tokenizer's vocabulary (an id past the embedding would crash the model).
CachedSource open_entry(const std::filesystem::path& dir, int64_t vocab_size) {
  const std::string corrupt = "corrupt data cache entry " + dir.string();
  const std::string rebuild = "delete " + dir.string() + " and run again to rebuild it";
  CachedSource c;
  try {
    c.stats = nlohmann::json::parse(read_text_file(dir / "meta.json")).get<SourceStats>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(corrupt + ": meta.json: " + e.what(), rebuild);
  }
  c.tokens = io::MappedFile::open(dir / "tokens.bin");
  c.loss = io::MappedFile::open(dir / "loss.bin");
  c.offsets = io::MappedFile::open(dir / "offsets.bin");
  const size_t n_tokens = c.tokens->size() / sizeof(int32_t);
  const size_t n_offsets = c.offsets->size() / sizeof(int64_t);  // compared by division: samples may be huge
  if (c.stats.samples < 0 || c.tokens->size() % sizeof(int32_t) != 0 || c.loss->size() != n_tokens ||
      c.offsets->size() % sizeof(int64_t) != 0 || n_offsets == 0 ||
      static_cast<uint64_t>(c.stats.samples) != n_offsets - 1) {
    throw Error(corrupt + ": the sizes of tokens.bin, loss.bin and offsets.bin do not match meta.json", rebuild);
  }
  // Samples are read as tokens[offsets[s], offsets[s + 1]): the offsets must rise from 0 to the token count, or a
  // damaged (or foreign) entry would make us read outside the mapping.
  const auto* offsets = reinterpret_cast<const int64_t*>(c.offsets->data());
  bool ordered = offsets[0] == 0 && offsets[c.stats.samples] == static_cast<int64_t>(n_tokens);
  for (int64_t s = 0; ordered && s < c.stats.samples; ++s) ordered = offsets[s] <= offsets[s + 1];
  if (!ordered) {
    throw Error(
        corrupt + ": offsets.bin does not rise from 0 to the " + std::to_string(n_tokens) + " tokens of tokens.bin",
        rebuild);
  }
  if (n_tokens > 0) {
    const at::Tensor ids = at::from_blob(const_cast<uint8_t*>(c.tokens->data()),  // NOLINT: read-only use
                                         {static_cast<int64_t>(n_tokens)}, at::kInt);
    const auto [lo, hi] = at::aminmax(ids);
    if (lo.item<int32_t>() < 0 || hi.item<int32_t>() >= vocab_size) {
      throw Error(fmt::format("{}: token ids range over [{}, {}], outside the tokenizer's vocabulary of {}", corrupt,
                              lo.item<int32_t>(), hi.item<int32_t>(), vocab_size),
                  rebuild);
    }
  }
  return c;
}

}  // namespace

SourceKeys source_keys(const std::filesystem::path& path, const std::string& format, const DatasetOptions& o,
                       const tok::Tokenizer& tokenizer) {
  nlohmann::json k;
  k["version"] = kCacheFormatVersion;
  const auto size = std::filesystem::file_size(path);
  k["size"] = size;
  if (size <= kContentHashLimit) {
    k["content"] = hex64(hash_file(path));
  } else {
    struct stat st {};
    ::stat(path.c_str(), &st);
    k["mtime_ns"] = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  }
  k["tokenizer"] = hex64(tokenizer.fingerprint());
  k["format"] = format;
  k["template"] = o.template_name;
  if (o.chat) k["chat_template"] = hex64(o.chat->fingerprint());
  k["last_turn_only"] = o.last_turn_only;
  k["seq_len"] = o.seq_len;
  k["overlong"] = name_of(o.overlong);
  k["on_error"] = name_of(o.on_error);
  k["add_bos"] = o.add_bos;
  k["add_eos"] = o.add_eos;
  const auto& f = o.fields;
  k["fields"] = {f.text, f.prompt, f.input, f.completion, f.messages, f.role, f.content};
  if (!o.roles.empty()) k["roles"] = o.roles;
  if (!o.system_prompt.empty()) k["system_prompt"] = o.system_prompt;
  SourceKeys keys;
  keys.content = hex64(hash_string(k.dump()));
  k["path"] = std::filesystem::absolute(path).lexically_normal().string();  // JSON objects dump sorted: keys as before
  keys.cache = hex64(hash_string(k.dump()));
  return keys;
}

CachedSource load_or_build_source(const std::filesystem::path& path, const DataSource& source, const DatasetOptions& o,
                                  const tok::Tokenizer& tokenizer) {
  if (o.cache_dir.empty()) throw ConfigError("no data cache directory", "set data.cache_dir");
  std::filesystem::create_directories(o.cache_dir);
  const SourceKeys keys = source_keys(path, name_of(source.format), o, tokenizer);
  const std::string& key = keys.cache;
  const auto dir = o.cache_dir / key;
  FileLock lock(o.cache_dir / (key + ".lock"));  // waits while another process or thread tokenizes this source
  if (std::filesystem::exists(dir / "meta.json")) {
    auto c = open_entry(dir, tokenizer.vocab_size());
    c.stats.from_cache = true;
    c.stats.content = keys.content;
    FT_LOG_INFO("data cache hit for {} ({} samples)", path.string(), c.stats.samples);
    return c;
  }
  std::ostringstream tid;
  tid << std::this_thread::get_id();
  // A stale partial entry without meta.json is replaced by the commit.
  StagedDir staged(dir, o.cache_dir / (key + ".tmp." + std::to_string(::getpid()) + "." + tid.str()));
  FT_LOG_INFO("tokenizing {} into the data cache {}", path.string(), dir.string());
  tokenize_source(path, source, o, tokenizer, staged.path());
  staged.commit();
  auto c = open_entry(dir, tokenizer.vocab_size());
  c.stats.content = keys.content;
  return c;
}

}  // namespace ft::data
