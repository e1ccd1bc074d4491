// The keys each section's visit() marks OnResume::kMustMatch (config.h), and their values: what a checkpoint
// records of its run's settings, and what a resumed run must repeat (train/fingerprint.h adds the model's shape).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"

namespace ft::config {

// Dotted key paths in visit() order ("model.quantize", "lora.rank", "data.train", ...).
const std::vector<std::string>& must_match_keys();

// Their values in `config` as JSON, by key path: numbers, bools and strings as themselves, settings by name, lists
// as arrays and sections (a data source) as objects, e.g. {"data.seq_len": 512, "data.train": [{"path": "/d/a.jsonl",
// "format": "text", "weight": 1.0}], ...}.
nlohmann::json must_match_values(const Config& config);

}  // namespace ft::config
