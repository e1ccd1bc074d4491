// What the fuzz targets share. Each target (one fuzz_*.cpp) defines LLVMFuzzerTestOneInput plus
// ft::fuzz::target_setup() and ft::fuzz::seeds(); this file's LLVMFuzzerInitialize silences logging, runs the
// target's setup, and with FT_FUZZ_WRITE_SEEDS=DIR writes the target's seed corpus into DIR and exits (the seeds
// are made by the targets themselves: no third-party files). Built with libFuzzer under the `fuzz` preset, and with
// replay_main.cpp (every seed, or the files given) in the normal build, where CTest runs them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.h"

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace ft::fuzz {

// Defined by each target: one-time fixtures (files on disk, a tokenizer) before the first input.
void target_setup();
// Defined by each target: the seed corpus, valid inputs of every mode the target has.
std::vector<std::string> seeds();

// A directory of this process for the fixtures and the inputs written to files; removed at exit.
const std::filesystem::path& scratch();
void write_bytes(const std::filesystem::path& path, std::string_view bytes);
std::string read_bytes(const std::filesystem::path& path);

// Most targets take a mode byte first (which file or which options) and the payload after it.
struct Input {
  uint8_t mode = 0;
  std::string_view payload;
};
Input split_mode(const uint8_t* data, size_t size);
std::string with_mode(uint8_t mode, std::string_view payload);

// The payload cut in two at the first `separator` (the second part empty when there is none).
std::pair<std::string_view, std::string_view> cut(std::string_view text, std::string_view separator);

// Runs `f`, for which a clean refusal (ft::Error and what derives from it: ConfigError, the template's raise) is
// an expected outcome. Any other exception escapes, and the fuzzer reports it as a crash: bad input must surface as
// ft::Error, with the context a user needs, never as a library's bare exception.
template <class F>
bool accepted(F&& f) {
  try {
    f();
    return true;
  } catch (const ft::Error&) {
    return false;
  }
}

}  // namespace ft::fuzz
