// What a resumed run must share with the run that wrote its checkpoint: the built model's shape and the settings
// config.h marks OnResume::kMustMatch (config/resume_keys.h). Trainer writes it into trainer_state.json as JSON text:
//   {"format": 2, "model": {"model_type": "llama", "hidden_size": 256, ...}, "settings": {"data.seq_len": 512, ...}}
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "model/args.h"

namespace ft::train {

// The fingerprint of a run with `config` on a model of shape `args`.
std::string make_fingerprint(const Config& config, const model::ModelArgs& args);

// Why a checkpoint with the fingerprint `saved` cannot resume a run whose fingerprint is `current`, one line per
// difference ("data.seq_len: 32 -> 48", "model.hidden_size: 256 -> 512"); empty when it can. Accepted:
// - a data source path named relatively in one and absolutely in the other, when both name the same file (runs
//   started before config.yaml named generated data by absolute path saved it relative to the working directory);
// - a marked key the checkpoint does not record (marked after it was written);
// - the layout checkpoints had before the marks (no "format"), compared in that layout.
std::vector<std::string> fingerprint_differences(const std::string& saved, const std::string& current);

}  // namespace ft::train
