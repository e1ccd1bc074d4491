// Internal to the dataset: tokenizing one JSON Lines source into a cache entry, under a cross-process lock.
#pragma once

#include <filesystem>
#include <memory>

#include "data/dataset.h"
#include "io/mapped_file.h"
#include "util/hash.h"

namespace ft::data {

// Bump when the cache layout or the tokenization rules change.
inline constexpr int kCacheFormatVersion = 2;

struct CachedSource {
  std::shared_ptr<io::MappedFile> tokens;   // I32 [total tokens]
  std::shared_ptr<io::MappedFile> loss;     // U8 [total tokens]
  std::shared_ptr<io::MappedFile> offsets;  // I64 [samples + 1]
  SourceStats stats;
};

// What names a source's tokens (hex): `content` from everything that changes them but the file's path (its bytes,
// or size and mtime over 256 MB, the tokenizer and the settings), `cache` from that and the path (the entry's name).
struct SourceKeys {
  std::string cache;
  std::string content;
};
SourceKeys source_keys(const std::filesystem::path& path, const std::string& format, const DatasetOptions& options,
                       const tok::Tokenizer& tokenizer);

// Loads the cache entry of `path`, tokenizing it first when absent (one process at a time, see dataset.h).
CachedSource load_or_build_source(const std::filesystem::path& path, const DataSource& source,
                                  const DatasetOptions& options, const tok::Tokenizer& tokenizer);

}  // namespace ft::data
