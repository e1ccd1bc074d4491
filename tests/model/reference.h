// Reference models made by tests/model/ref/hf_ref.py with transformers, shared by the parity suites.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>

#include "data/batch.h"
#include "support/test_support.h"
#include "util/fs.h"

namespace ft::test {

// $FT_PYTHON / $FT_SOURCE_DIR, else the paths baked in at configure time (CTest may pass only the first
// ENVIRONMENT entry of a discovered test).
inline std::string ref_python() {
  const char* v = std::getenv("FT_PYTHON");
  return v != nullptr && *v != '\0' ? std::string(v) : std::string(FT_MODEL_TEST_PYTHON);
}
inline std::filesystem::path ref_source_dir() {
  const char* v = std::getenv("FT_SOURCE_DIR");
  return v != nullptr && *v != '\0' ? std::filesystem::path(v) : std::filesystem::path(FT_MODEL_TEST_SOURCE_DIR);
}

inline std::string ref_script() { return (ref_source_dir() / "tests/model/ref/hf_ref.py").string(); }

// Reference models and outputs from tests/model/ref/hf_ref.py. CTest runs every case in its own process, so they
// are made once into a temp directory keyed by the script's contents and published by an atomic rename.
inline std::filesystem::path reference_dir() {
  static std::filesystem::path dir;
  if (!dir.empty()) return dir;
  const std::string script = read_file(ref_script());
  const auto key = std::to_string(std::hash<std::string>{}(script + ref_python()));
  const auto final_dir = std::filesystem::temp_directory_path() / ("ft-model-refs-" + key);
  if (!std::filesystem::exists(final_dir / "qwen2" / "ref.json")) {
    const auto staging = std::filesystem::temp_directory_path() / ("ft-model-refs-" + key + "-" + std::to_string(::getpid()));
    const auto r = run(ref_python() + " " + shell_quote(ref_script()) + " make --out " + shell_quote(staging.string()));
    if (r.exit_code != 0) throw std::runtime_error("hf_ref.py make failed:\n" + r.output);
    std::error_code ec;
    std::filesystem::rename(staging, final_dir, ec);  // loses harmlessly to a concurrent maker
    ft::remove_tree(staging);
  }
  dir = final_dir;
  return dir;
}

// The next-token batch of transformers' labels=input_ids: every position but the last predicts the next token.
inline data::Batch next_token_batch(const at::Tensor& ids) {
  data::Batch b;
  b.input_ids = ids;
  b.labels = at::full_like(ids, data::kIgnoreIndex);
  b.labels.narrow(1, 0, ids.size(1) - 1).copy_(ids.narrow(1, 1, ids.size(1) - 1));
  b.position_ids = at::arange(ids.size(1)).unsqueeze(0).expand(ids.sizes()).contiguous();
  b.num_target_tokens = ids.size(0) * (ids.size(1) - 1);
  b.num_samples = ids.size(0);
  return b;
}

}  // namespace ft::test
