// Shared helpers of the tokenizer tests: the Python reference outputs (generated once per script version and
// cached in the build tree), temporary directories, running Python.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace ft::tok::test {

std::string python();
std::filesystem::path source_dir();
// Runs `command` through the shell; returns its exit status.
int run(const std::string& command);
// refs.json of ref/make_refs.py (and the directory holding the tokenizer.json files it trained).
const nlohmann::json& refs();
std::filesystem::path refs_dir();
// A fresh, empty directory under the system temp dir, removed at process exit.
std::filesystem::path temp_dir(const std::string& tag);
void write_file(const std::filesystem::path& p, const std::string& content);

}  // namespace ft::tok::test
