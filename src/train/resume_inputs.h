// What a resumed run reads whose content no setting pins: each SFT data.train source (data::SourceKeys::content: its
// bytes when up to 256 MB, else its size and mtime, and how it is tokenized, not its path) and, with LoRA, the frozen
// base weights under model.path (a sample of their files' bytes). trainer_state.json keeps them as JSON:
//   {"data.train": ["3f09...", ""], "model.path": "9a1c..."}
// A difference on resume is a warning, not a refusal: the same records rewritten, or the same weights saved again in
// another layout, differ too, and the fingerprint (train/fingerprint.h) already refuses what changes shapes.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"

namespace ft::train {

// The inputs of a run with `config` whose data.train sources gave `train_content` (DataParts::train_content).
// Reads the sample of model.path's weights only when `with_base` (rank 0 of a LoRA run from a model directory).
nlohmann::json resume_inputs(const Config& config, const std::vector<std::string>& train_content, bool with_base);

// One line per input that differs between the checkpoint's `saved` and this run's `current` (which the config names,
// and what follows for the resumed run); inputs either side did not record are not compared.
std::vector<std::string> resume_input_changes(const nlohmann::json& saved, const nlohmann::json& current,
                                              const Config& config);

// A digest of the *.safetensors files directly in `model_dir`, in name order: each one's size and 16 blocks of
// 4 KiB spread over it. Cheap next to loading them, and different for different weights of one shape.
std::string weight_files_sample(const std::filesystem::path& model_dir);

}  // namespace ft::train
