#include "data/records.h"

#include <map>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "data/records_internal.h"
#include "jinja/value.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::data {
namespace {

using Kind = chat::Segment::Kind;
using nlohmann::json;

std::string type_name(const json& v) { return v.type_name(); }

jinja::Value json_to_value(const json& v) { return jinja::Value::parse(v.dump()); }

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

// A role or ShareGPT speaker name as system|user|assistant|tool: data.roles first, then the names datasets use.
std::string map_role(const std::string& name, const RecordOptions& o) {
  static const std::map<std::string, std::string> kKnown = {
      {"human", "user"}, {"gpt", "assistant"}, {"function_call", "assistant"}, {"observation", "tool"}};
  if (const auto it = o.roles.find(name); it != o.roles.end()) return it->second;
  if (const auto it = kKnown.find(name); it != kKnown.end()) return it->second;
  return name;
}

// The Alpaca field that holds `what` (data.fields' name, or Alpaca's own when the record uses it instead of the
// default name): instruction for prompt, output for completion.
const char* alpaca_name(const json& record, const std::string& configured, const char* default_name,
                        const char* alpaca) {
  if (!record.contains(configured) && configured == default_name && record.contains(alpaca)) return alpaca;
  return configured.c_str();
}

// Roles a conversation may use: the built-in templates know system, user and assistant; the models' own templates
// also tool calls and their results under the names their families use.
bool known_role(const std::string& role, bool model_template) {
  if (role == "system" || role == "user" || role == "assistant") return true;
  return model_template && (role == "tool" || role == "ipython" || role == "function" || role == "developer");
}

// ShareGPT's {"conversations": [{"from": "human", "value": ...}]} as role/content messages.
json from_sharegpt(const json& conversations, const RecordOptions& o, bool model_template) {
  if (!conversations.is_array()) {
    throw RecordError("conversations", "field 'conversations' must be an array, got " + type_name(conversations));
  }
  json out = json::array();
  for (size_t i = 0; i < conversations.size(); ++i) {
    const std::string path = "conversations[" + std::to_string(i) + "]";
    const auto& turn = conversations[i];
    if (!turn.is_object()) throw RecordError(path, "'" + path + "' must be an object, got " + type_name(turn));
    const std::string from = get_string(turn, "from", path + ".from");
    const std::string role = map_role(from, o);
    if (!known_role(role, /*model_template=*/true)) {
      throw RecordError(path + ".from", "unknown speaker '" + from + "' in '" + path +
                                            ".from' (expected human, gpt, system, tool, function_call or observation; "
                                            "map other names with data.roles, e.g. bot=assistant)");
    }
    if (!known_role(role, model_template)) {  // named here, as the record says it, not as the messages it becomes
      throw RecordError(path + ".from", "speaker '" + from + "' in '" + path + ".from' is a " + role +
                                            " turn, which only a model's own chat template can render (the "
                                            "built-in templates know system, user and assistant)");
    }
    out.push_back({{"role", role}, {"content", get_string(turn, "value", path + ".value")}});
  }
  return out;
}

// A single-turn record (Alpaca's instruction/input/output, or prompt/completion) as user and assistant messages.
json from_single_turn(const json& record, const RecordOptions& o) {
  const auto& f = o.fields;
  const std::string prompt_key = alpaca_name(record, f.prompt, "prompt", "instruction");
  const std::string completion_key = alpaca_name(record, f.completion, "completion", "output");
  std::string user = get_string(record, prompt_key, prompt_key);
  const std::string input = optional_string(record, f.input);
  if (!input.empty()) user += "\n\n" + input;
  return json::array({{{"role", "user"}, {"content", user}},
                      {{"role", "assistant"}, {"content", get_string(record, completion_key, completion_key)}}});
}

// The record's messages as {"role", "content", ...} objects (data.fields names mapped to role/content; other keys
// kept for the template, e.g. tool_calls). Built-in templates know system, user and assistant only.
jinja::Value parse_messages(const json& record, const RecordOptions& o, bool model_template) {
  const auto& f = o.fields;
  json j = record;
  if (!j.contains(f.messages)) {
    json turns;
    if (j.contains("conversations")) {
      turns = from_sharegpt(j["conversations"], o, model_template);
    } else if (j.contains(alpaca_name(j, f.prompt, "prompt", "instruction"))) {
      turns = from_single_turn(j, o);
    } else {
      throw RecordError(f.messages, "missing field '" + f.messages +
                                        "' (a chat record holds messages, ShareGPT conversations, Alpaca "
                                        "instruction/output or prompt/completion)");
    }
    for (auto& m : turns) m = {{f.role, m["role"]}, {f.content, m["content"]}};
    j[f.messages] = std::move(turns);
  }
  // A "system" column (else data.system_prompt) becomes the first message unless the conversation has one.
  std::string system;
  if (j.contains("system") && j["system"].is_string()) system = j["system"].get<std::string>();
  if (system.empty()) system = o.system_prompt;
  if (!system.empty() && j[f.messages].is_array() &&
      !(j[f.messages].size() > 0 && j[f.messages][0].is_object() && j[f.messages][0].contains(f.role) &&
        j[f.messages][0][f.role].is_string() && map_role(j[f.messages][0][f.role].get<std::string>(), o) == "system")) {
    j[f.messages].insert(j[f.messages].begin(), json{{f.role, "system"}, {f.content, system}});
  }
  return parse_message_list(j[f.messages], f.messages, o, model_template);
}

}  // namespace

jinja::Value parse_message_list(const json& msgs, const std::string& field, const RecordOptions& o,
                                bool model_template) {
  const auto& f = o.fields;
  if (!msgs.is_array()) {
    throw RecordError(field, "field '" + field + "' must be an array, got " + type_name(msgs));
  }
  if (msgs.empty()) throw RecordError(field, "field '" + field + "' is empty");
  jinja::Value out = jinja::Value::array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string path = field + "[" + std::to_string(i) + "]";
    if (!msgs[i].is_object()) throw RecordError(path, "'" + path + "' must be an object, got " + type_name(msgs[i]));
    jinja::Value m = jinja::Value::object();
    const std::string role = map_role(get_string(msgs[i], f.role, path + "." + f.role), o);
    m["role"] = role;
    m["content"] = get_string(msgs[i], f.content, path + "." + f.content);
    if (!known_role(role, model_template)) {
      throw RecordError(path + "." + f.role,
                        "unknown role '" + role + "' in '" + path + "." + f.role + "' (expected " +
                            (model_template ? "system, user, assistant, tool, ipython, function or developer"
                                      : "system, user or assistant") +
                            "; map other names with data.roles, e.g. bot=assistant)");
    }
    for (const auto& [key, value] : msgs[i].items()) {
      if (key != f.role && key != f.content) m[key] = json_to_value(value);
    }
    out.push_back(std::move(m));
  }
  return out;
}

namespace {

// The line as a JSON object (RecordError for invalid UTF-8, invalid JSON or another JSON type).
json parse_object(std::string_view line) {
  if (const auto bad = tok::unicode::find_invalid_utf8(line)) {
    throw RecordError("", "invalid UTF-8 at byte " + std::to_string(*bad + 1));
  }
  const json j = parse_record_json(line);
  if (!j.is_object()) throw RecordError("", "a record must be a JSON object, got " + type_name(j));
  return j;
}

}  // namespace

json parse_record_json(std::string_view text) {
  const json::parser_callback_t limit_depth = [](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= jinja::detail::kMaxNesting) {
      throw RecordError("", fmt::format("JSON nested more than {} levels deep", jinja::detail::kMaxNesting));
    }
    return true;
  };
  try {
    return json::parse(text, limit_depth);
  } catch (const json::exception& e) {
    throw RecordError("", std::string("invalid JSON: ") + e.what());
  }
}

json parse_record_object(std::string_view line) {
  return parse_object(line);
}

std::vector<chat::Segment> parse_record(std::string_view line, const RecordOptions& o) {
  const json j = parse_object(line);
  const auto& f = o.fields;
  std::vector<chat::Segment> out;
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
      const bool alpaca = o.format == Format::kAlpaca;
      const std::string prompt_key = alpaca ? alpaca_name(j, f.prompt, "prompt", "instruction") : f.prompt;
      const std::string completion_key = alpaca ? alpaca_name(j, f.completion, "completion", "output") : f.completion;
      std::string prompt = get_string(j, prompt_key, prompt_key);
      const auto& completion = get_string(j, completion_key, completion_key);
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
      const auto messages = parse_messages(j, o, /*model_template=*/false);
      std::vector<chat::ChatMessage> plain;
      for (const auto& m : messages) plain.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      try {
        return chat::render_chat(o.template_name, plain);
      } catch (const ConfigError&) {
        throw;
      } catch (const Error& e) {
        throw RecordError(f.messages, e.what());
      }
    }
    case Format::kPretokenized:
      throw RecordError("", "pretokenized data is binary, not JSON Lines");
    case Format::kPreference:
      break;
  }
  throw RecordError("", "preference pairs are read by data/preference.h, not as SFT samples");
}

chat::TokenizedSample tokenize_record(std::string_view line, const RecordOptions& o, const tok::Tokenizer& tokenizer) {
  if (o.format != Format::kChat || o.chat == nullptr) return chat::tokenize_segments(tokenizer, parse_record(line, o));
  const json j = parse_object(line);
  const auto messages = parse_messages(j, o, /*model_template=*/true);
  try {
    return o.chat->tokenize(o.chat->render(messages, /*add_generation_prompt=*/false, o.last_turn_only));
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {  // the template's raise_exception (e.g. roles out of order)
    throw RecordError(o.fields.messages, e.what());
  }
}

void BadRecords::add(int64_t line_no, const RecordError& e) {
  const std::string field = e.field().empty() ? "" : fmt::format(" (field '{}')", e.field());
  std::string message = fmt::format("{}:{}: {}{}", path_.string(), line_no, e.what(), field);
  if (on_error_ == OnError::kFail) {
    throw Error(std::move(message), "fix the line, check data.fields and the format, or set data.on_error: skip");
  }
  if (count_ == 0) first_error_ = std::move(message);
  ++count_;
  if (lines_.size() < kMaxLines) lines_.push_back(line_no);
}

void BadRecords::finish(int64_t records) const {
  if (records > 0) return;
  if (on_error_ == OnError::kFail) {
    throw Error(path_.string() + ":1: the file is empty (no records)", "check the data path");
  }
  FT_LOG_WARN("{}: the file is empty (no records); skipped", path_.string());
}

void warn_skipped_lines(const std::string& path, int64_t count, const std::vector<int64_t>& lines) {
  if (count > 0) FT_LOG_WARN("{}: skipped {} bad line(s), first at line(s) {}", path, count, fmt::join(lines, ", "));
}

}  // namespace ft::data
