#include "tokenizer/json_util.h"

#include <fstream>
#include <sstream>

#include "tokenizer/unicode.h"
#include "util/error.h"

namespace ft::tok {

JsonCtx JsonCtx::at(std::string_view key) const {
  JsonCtx c = *this;
  c.path = path.empty() ? std::string(key) : path + "." + std::string(key);
  return c;
}

JsonCtx JsonCtx::at(size_t index) const {
  JsonCtx c = *this;
  c.path = path + "[" + std::to_string(index) + "]";
  return c;
}

std::string JsonCtx::where() const {
  return path.empty() ? file : file + ": " + path;
}

void JsonCtx::fail(const std::string& what) const {
  throw ft::ConfigError(where() + ": " + what, hint);
}

void check_tokenizer_file_size(const std::filesystem::path& file) {
  // The largest real tokenizer files are tens of MB; parsed JSON takes several times the file's size in memory.
  constexpr std::uintmax_t kMaxBytes = 256ull << 20;
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  if (!ec && size > kMaxBytes) {
    throw ft::ConfigError(file.string() + ": " + std::to_string(size) + " bytes, more than the " +
                              std::to_string(kMaxBytes >> 20) + " MiB a tokenizer file may have",
                          "this is not a tokenizer file, or a damaged one; download it again");
  }
}

std::string read_file_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw ft::ConfigError(file.string() + ": cannot open tokenizer file",
                          "check the path and that the file is readable");
  }
  check_tokenizer_file_size(file);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_json_file(const std::filesystem::path& file, const std::string& hint) {
  const std::string text = read_file_bytes(file);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw ft::ConfigError(file.string() + ": not valid JSON (byte " + std::to_string(e.byte) + "): " + e.what(),
                          hint.empty() ? "the file is truncated or corrupt; download it again" : hint);
  } catch (const json::exception& e) {  // e.g. a number too large for a double (out_of_range 406)
    throw ft::ConfigError(file.string() + ": not valid JSON: " + e.what(),
                          hint.empty() ? "the file is truncated or corrupt; download it again" : hint);
  }
}

std::string json_type_name(const json& j) {
  return j.type_name();
}

const json& require(const json& obj, const char* key, const JsonCtx& ctx) {
  if (!obj.is_object()) ctx.fail("expected an object, found " + json_type_name(obj));
  auto it = obj.find(key);
  if (it == obj.end()) ctx.at(key).fail("missing required field");
  return *it;
}

std::string get_string(const json& obj, const char* key, const JsonCtx& ctx) {
  const json& v = require(obj, key, ctx);
  if (!v.is_string()) ctx.at(key).fail("expected a string, found " + json_type_name(v));
  return v.get<std::string>();
}

std::optional<std::string> get_opt_string(const json& obj, const char* key, const JsonCtx& ctx) {
  if (!obj.is_object()) ctx.fail("expected an object, found " + json_type_name(obj));
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) ctx.at(key).fail("expected a string or null, found " + json_type_name(*it));
  return it->get<std::string>();
}

bool get_bool(const json& obj, const char* key, bool fallback, const JsonCtx& ctx) {
  if (!obj.is_object()) ctx.fail("expected an object, found " + json_type_name(obj));
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) ctx.at(key).fail("expected true or false, found " + json_type_name(*it));
  return it->get<bool>();
}

int64_t get_int(const json& obj, const char* key, const JsonCtx& ctx) {
  const json& v = require(obj, key, ctx);
  if (!v.is_number_integer()) ctx.at(key).fail("expected an integer, found " + json_type_name(v));
  return v.get<int64_t>();
}

std::optional<int64_t> get_opt_int(const json& obj, const char* key, const JsonCtx& ctx) {
  if (!obj.is_object()) ctx.fail("expected an object, found " + json_type_name(obj));
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) ctx.at(key).fail("expected an integer, found " + json_type_name(*it));
  return it->get<int64_t>();
}

std::string get_type(const json& obj, const JsonCtx& ctx) {
  return get_string(obj, "type", ctx);
}

char32_t get_char(const json& obj, const char* key, const JsonCtx& ctx) {
  const std::string s = get_string(obj, key, ctx);
  size_t i = 0;
  if (s.empty() || unicode::find_invalid_utf8(s)) ctx.at(key).fail("expected a single character");
  const char32_t cp = unicode::next_cp(s, i);
  if (i != s.size()) ctx.at(key).fail("expected a single character, found \"" + s + "\"");
  return cp;
}

void unsupported_component(const std::string& kind, const std::string& type, const JsonCtx& ctx,
                           const std::string& supported) {
  throw ft::ConfigError(
      ctx.where() + ": unsupported " + kind + " type \"" + type + "\"",
      "supported " + kind + " types: " + supported + "; convert the tokenizer or file an issue with the model name");
}

}  // namespace ft::tok
