// A fuzz target without libFuzzer: runs every seed of the target (no arguments) or the given files and
// directories (e.g. a corpus or a crash file a fuzzer wrote) through LLVMFuzzerTestOneInput once. CTest runs the
// seeds of every target in the normal build, so the targets compile with the project's compiler and flags and their
// seeds keep passing; `scripts/fuzz.sh` runs the same sources under libFuzzer.
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "fuzz_support.h"

int main(int argc, char** argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> inputs;
  if (argc == 1) {
    inputs = ft::fuzz::seeds();
  } else {
    for (int i = 1; i < argc; ++i) {
      const std::filesystem::path p = argv[i];
      if (std::filesystem::is_directory(p)) {
        for (const auto& e : std::filesystem::directory_iterator(p)) {
          if (e.is_regular_file()) inputs.push_back(ft::fuzz::read_bytes(e.path()));
        }
      } else {
        inputs.push_back(ft::fuzz::read_bytes(p));
      }
    }
  }
  for (const auto& input : inputs) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  std::cout << "replayed " << inputs.size() << " inputs\n";
  return inputs.empty() ? 1 : 0;
}
