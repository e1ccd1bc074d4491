// Shared fixtures of the data tests: one tokenizer trained per process, Python reference calls.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace ft::test {

// A BPE model trained once per process (C++ trainer) on a corpus mixing scripts, with the chat markers
// <|im_start|> <|im_end|> <|start_header_id|> <|end_header_id|> <|eot_id|> as whole pieces.
const std::filesystem::path& test_tokenizer_model();
std::unique_ptr<tok::Tokenizer> load_test_tokenizer();

// Runs `script` with the reference Python; `input` is readable as json.load(open(sys.argv[1])); the script
// prints one JSON value, returned here. Fails the test (throws) when Python fails.
nlohmann::json run_python(const std::string& script, const nlohmann::json& input);

// `f` throws ft::Error whose message and hint contain every one of `parts`.
template <class F>
void expect_error_contains(F f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string text = std::string(e.what()) + " " + e.hint();
    for (const auto& part : parts) EXPECT_NE(text.find(part), std::string::npos) << part << " not in: " << text;
  }
}

}  // namespace ft::test
