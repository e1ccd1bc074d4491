// Shared fixtures of the data tests: one tokenizer trained per process, Python reference calls.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

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

}  // namespace ft::test
