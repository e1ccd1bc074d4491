// The quantization references of tests/quant/ref: a script run by $FT_PYTHON as `SCRIPT IN.safetensors [EXTRA...]
// OUT.safetensors`. Exit status 3 means its library (bitsandbytes, torchao) cannot be imported: the tests skip.
#pragma once

#include <string>
#include <vector>

#include "io/safetensors.h"
#include "support/scratch_dir.h"
#include "support/test_support.h"

namespace ft::test {

struct PythonReference {
  io::TensorMap tensors;    // OUT.safetensors
  std::string skip_reason;  // the script's word on why its library cannot be imported
  std::string failure;      // any other failure, with the script's output
};

// Runs tests/quant/ref/`script` on `inputs`; `extra_files` (name, text) are written beside IN.safetensors and passed
// between it and OUT.safetensors, in order.
inline PythonReference run_python_reference(const std::string& script, const io::TensorMap& inputs,
                                            const std::vector<std::pair<std::string, std::string>>& extra_files = {}) {
  PythonReference r;
  ScratchDir dir("ft-quant-ref");
  io::write_safetensors(dir / "in.safetensors", inputs);
  std::string command = shell_quote(python()) + " " +
                        shell_quote((source_dir() / "tests" / "quant" / "ref" / script).string()) + " " +
                        shell_quote((dir / "in.safetensors").string());
  for (const auto& [name, text] : extra_files) {
    write_file(dir / name, text);
    command += " " + shell_quote((dir / name).string());
  }
  const auto result = run(command + " " + shell_quote((dir / "out.safetensors").string()));
  if (result.exit_code == 3) {
    r.skip_reason = result.output;
  } else if (result.exit_code != 0) {
    r.failure = script + " failed (exit " + std::to_string(result.exit_code) + "): " + result.output;
  } else {
    // Cloned: the mapping goes away with the scratch directory.
    for (const auto& [name, t] : io::read_safetensors(dir / "out.safetensors")) r.tensors[name] = t.clone();
  }
  return r;
}

}  // namespace ft::test
