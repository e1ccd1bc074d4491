#include "data/records.h"

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace ft::data {
namespace {

using Kind = Segment::Kind;
using nlohmann::json;

std::string type_name(const json& v) { return v.type_name(); }

const std::string& get_string(const json& obj, const std::string& key, const std::string& field_path) {
  if (!obj.contains(key)) throw RecordError(field_path, "missing field '" + field_path + "'");
  const auto& v = obj[key];
  if (!v.is_string()) {
    throw RecordError(field_path, "field '" + field_path + "' must be a string, got " + type_name(v));
  }
  return v.get_ref<const std::string&>();
}

std::string optional_string(const json& obj, const std::string& key) {
  if (!obj.contains(key) || obj[key].is_null()) return {};
  if (!obj[key].is_string()) throw RecordError(key, "field '" + key + "' must be a string, got " + type_name(obj[key]));
  return obj[key].get<std::string>();
}

}  // namespace

Format parse_format(const std::string& name) {
  if (name == "text") return Format::kText;
  if (name == "prompt_completion") return Format::kPromptCompletion;
  if (name == "alpaca") return Format::kAlpaca;
  if (name == "chat") return Format::kChat;
  if (name == "pretokenized") return Format::kPretokenized;
  throw ConfigError("unknown data format '" + name + "'",
                    "use text, prompt_completion, alpaca, chat or pretokenized (data.train[].format)");
}

bool valid_utf8(std::string_view s, size_t* bad_offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xe0) == 0xc0) { len = 2; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { len = 3; cp = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { len = 4; cp = c & 0x07; }
    else { if (bad_offset) *bad_offset = i; return false; }
    if (i + len > n) { if (bad_offset) *bad_offset = i; return false; }
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) { if (bad_offset) *bad_offset = i; return false; }
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    const bool overlong = (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) { if (bad_offset) *bad_offset = i; return false; }
    i += len;
  }
  return true;
}

std::vector<Segment> parse_record(std::string_view line, const RecordOptions& o) {
  size_t bad = 0;
  if (!valid_utf8(line, &bad)) throw RecordError("", "invalid UTF-8 at byte " + std::to_string(bad + 1));
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    throw RecordError("", std::string("invalid JSON: ") + e.what());
  }
  if (!j.is_object()) throw RecordError("", "a record must be a JSON object, got " + type_name(j));
  const auto& f = o.fields;
  std::vector<Segment> out;
  auto bos = [&] { if (o.add_bos) out.push_back({Kind::kBos, {}, false}); };
  switch (o.format) {
    case Format::kText: {
      const auto& t = get_string(j, f.text, f.text);
      bos();
      out.push_back({Kind::kText, t, true});
      if (o.add_eos) out.push_back({Kind::kEos, {}, true});
      return out;
    }
    case Format::kPromptCompletion:
    case Format::kAlpaca: {
      std::string prompt = get_string(j, f.prompt, f.prompt);
      const auto& completion = get_string(j, f.completion, f.completion);
      if (o.format == Format::kAlpaca) {
        const std::string input = optional_string(j, f.input);
        prompt = "### Instruction:\n" + prompt + "\n\n" + (input.empty() ? "" : "### Input:\n" + input + "\n\n") +
                 "### Response:\n";
      }
      bos();
      out.push_back({Kind::kText, prompt, false});
      out.push_back({Kind::kText, completion, true});
      if (o.add_eos) out.push_back({Kind::kEos, {}, true});
      return out;
    }
    case Format::kChat: {
      if (!j.contains(f.messages)) throw RecordError(f.messages, "missing field '" + f.messages + "'");
      const auto& msgs = j[f.messages];
      if (!msgs.is_array()) {
        throw RecordError(f.messages, "field '" + f.messages + "' must be an array, got " + type_name(msgs));
      }
      if (msgs.empty()) throw RecordError(f.messages, "field '" + f.messages + "' is empty");
      std::vector<ChatMessage> messages;
      for (size_t i = 0; i < msgs.size(); ++i) {
        const std::string path = f.messages + "[" + std::to_string(i) + "]";
        if (!msgs[i].is_object()) throw RecordError(path, "'" + path + "' must be an object, got " + type_name(msgs[i]));
        ChatMessage m{get_string(msgs[i], f.role, path + "." + f.role),
                      get_string(msgs[i], f.content, path + "." + f.content)};
        if (m.role != "system" && m.role != "user" && m.role != "assistant") {
          throw RecordError(path + "." + f.role, "unknown role '" + m.role + "' in '" + path + "." + f.role +
                                                     "' (expected system, user or assistant)");
        }
        messages.push_back(std::move(m));
      }
      try {
        return render_chat(o.template_name, messages);
      } catch (const ConfigError&) {
        throw;
      } catch (const Error& e) {
        throw RecordError(f.messages, e.what());
      }
    }
    case Format::kPretokenized:
      break;
  }
  throw RecordError("", "pretokenized data is binary, not JSON Lines");
}

}  // namespace ft::data
