// Typed access to tokenizer JSON with errors that name the file, the JSON path and what is wrong.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace ft::tok {

using json = nlohmann::json;

// Where a JSON value sits: "<file>: <path>" in messages, e.g. "tokenizer.json: model.merges[17]".
struct JsonCtx {
  std::string file;
  std::string path;
  std::string hint;  // appended to every error raised through this context

  JsonCtx at(std::string_view key) const;
  JsonCtx at(size_t index) const;
  std::string where() const;
  [[noreturn]] void fail(const std::string& what) const;
};

// Reads and parses a JSON file; a syntax error names the file, line/byte position and the parser's message.
json read_json_file(const std::filesystem::path& file, const std::string& hint);
// The whole file, after check_tokenizer_file_size.
std::string read_file_bytes(const std::filesystem::path& file);
// Throws ft::ConfigError naming the file when it is larger than any tokenizer file (256 MiB).
void check_tokenizer_file_size(const std::filesystem::path& file);

const json& require(const json& obj, const char* key, const JsonCtx& ctx);
std::string get_string(const json& obj, const char* key, const JsonCtx& ctx);
std::optional<std::string> get_opt_string(const json& obj, const char* key, const JsonCtx& ctx);
bool get_bool(const json& obj, const char* key, bool fallback, const JsonCtx& ctx);
int64_t get_int(const json& obj, const char* key, const JsonCtx& ctx);
std::optional<int64_t> get_opt_int(const json& obj, const char* key, const JsonCtx& ctx);
// The "type" tag of a component object.
std::string get_type(const json& obj, const JsonCtx& ctx);
// A single character ("▁"), as tokenizers' char-typed fields.
char32_t get_char(const json& obj, const char* key, const JsonCtx& ctx);
std::string json_type_name(const json& j);

[[noreturn]] void unsupported_component(const std::string& kind, const std::string& type, const JsonCtx& ctx,
                                        const std::string& supported);

}  // namespace ft::tok
