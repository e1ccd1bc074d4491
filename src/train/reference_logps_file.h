// Precomputed reference log-probs (preference.precompute_ref_logps) kept beside the tokenized data, so that a resumed
// run, or any other run over the same pairs from the same starting model (a sweep's trials), reads them instead of
// scoring every pair again:
//   <data.cache_dir>/reference_logps/<key>.safetensors   F32 [distinct pairs, 2] "logps" (chosen, rejected)
// The key covers what the values depend on; a file under another key is ignored (and left for the run it belongs to).
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <optional>
#include <string>

#include "config/config.h"

namespace ft::data {
class PreferenceDataset;
}
namespace ft::dist {
class Communicator;
}

namespace ft::train {

// What the reference log-probs depend on besides the pairs: the starting model (model.path's files by name, size and
// modification time; the model and tokenizer settings, run.seed for a random init or added tokens), the device, the
// precision and kernels, and the batch layout of the pass.
std::string reference_logps_context(const Config& cfg, c10::Device device);

// The file's key: a hash of `context` and every distinct pair's tokens and scored positions.
std::string reference_logps_key(const data::PreferenceDataset& pairs, const std::string& context);

// The table under `key` in `dir`, read by rank 0 and broadcast, so that every rank takes the same branch whether or
// not the directory is shared; nullopt when rank 0 has no readable file of that key and shape.
std::optional<at::Tensor> read_reference_logps(const std::filesystem::path& dir, const std::string& key, int64_t pairs,
                                               dist::Communicator* comm, int rank);

// Rank 0 writes the table under `key` (a temporary name, then a rename). A failure to write is logged, not fatal:
// the run has its values; the next one computes them again.
void write_reference_logps(const std::filesystem::path& dir, const std::string& key, const at::Tensor& table, int rank);

}  // namespace ft::train
