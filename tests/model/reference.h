// Reference models made by tests/model/ref/hf_ref.py with transformers, shared by the parity suites.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "data/batch.h"
#include "support/test_support.h"

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

// Reference models and outputs from tests/model/ref/hf_ref.py, made once per content of the script (made_once).
inline std::filesystem::path reference_dir() {
  static const std::filesystem::path dir =
      made_once("ft-model-refs", read_file(ref_script()) + ref_python(), [](const std::filesystem::path& out) {
        return run(ref_python() + " " + shell_quote(ref_script()) + " make --out " + shell_quote(out.string()));
      });
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
