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

// The cache key of a source (hex), from everything that changes its tokens.
std::string source_cache_key(const std::filesystem::path& path, const std::string& format,
                             const DatasetOptions& options, const tok::Tokenizer& tokenizer);

// Loads the cache entry of `path`, tokenizing it first when absent (one process at a time, see dataset.h).
CachedSource load_or_build_source(const std::filesystem::path& path, const DataSource& source,
                                  const DatasetOptions& options, const tok::Tokenizer& tokenizer);

}  // namespace ft::data
