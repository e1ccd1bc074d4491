// Helpers of the `finetune sweep` suites: a tiny base config, the command, summary.csv and PNG readers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace ft::test {

// A tiny from-scratch run on the CPU (synthetic data and tokenizer trained at start, evaluation every 8 steps,
// checkpoints every 4), deterministic, with its dataset cache under `dir`/cache.
std::string tiny_sweep_base(const std::filesystem::path& dir);

// `finetune sweep --config BASE --sweep SWEEP ARGS`.
std::string sweep_cmd(const std::filesystem::path& base, const std::filesystem::path& sweep,
                      const std::string& args = "");

// summary.csv as rows of column -> cell (quoted cells unquoted).
std::vector<std::map<std::string, std::string>> read_csv(const std::filesystem::path& path);

// metrics.jsonl by event ("train", "eval") and step; a step logged twice keeps its last line.
std::map<std::string, std::map<int64_t, nlohmann::json>> read_metrics(const std::filesystem::path& run_dir);

// <trial dir>/trial.json.
nlohmann::json trial_state(const std::filesystem::path& trial_dir);

// The string at `key` of `j`, "" when absent (json::value() with a string default trips GCC 12's -Wnull-dereference).
std::string text_at(const nlohmann::json& j, const std::string& key);
// The number at `key` of `j`, NaN when absent (for the same reason, without json::value() or get<double>()).
double number_at(const nlohmann::json& j, const std::string& key);

// Width and height of a PNG file (from its IHDR), nullopt when it is not a PNG.
std::optional<std::pair<uint32_t, uint32_t>> png_size(const std::filesystem::path& path);

// How many times `part` occurs in `text`.
size_t count_of(const std::string& text, const std::string& part);

}  // namespace ft::test
