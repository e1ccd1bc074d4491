// Synthetic instruction tasks whose answers can be checked exactly (the demo and many tests train on them).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace ft::data {

struct SynthSample {
  std::string prompt;      // e.g. "Add: 472 + 95\nAnswer:"
  std::string completion;  // e.g. " 567"
};

// Task names: add (multi-digit addition), reverse (reverse a list of digits), sort (sort a list of numbers),
// copy (repeat a letter string), upper (uppercase a lowercase word).
const std::vector<std::string>& synth_task_names();

// `n` samples of `task`, a pure function of (task, n, seed). Throws ft::ConfigError for an unknown task.
std::vector<SynthSample> synth_generate(const std::string& task, int64_t n, uint64_t seed);

// Writes samples as JSON Lines in prompt_completion format ({"prompt": ..., "completion": ...}).
void write_synth_jsonl(const std::vector<SynthSample>& samples, const std::filesystem::path& path);

// synth_generate + write_synth_jsonl.
void write_synthetic(const std::string& task, int64_t n, uint64_t seed, const std::filesystem::path& path);

// True when `generated` equals `expected` after trimming whitespace at both ends of each.
bool exact_match(std::string_view generated, std::string_view expected);

}  // namespace ft::data
