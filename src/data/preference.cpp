// Preference records: reading, the implicit prompt, and TRL 1.16's two tokenizations (DPOTrainer, CPO/ORPO's
// tokenize_row). Each step names the TRL function it follows; the tests run those functions on the same records.
#include "data/preference.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "data/json_records.h"
#include "data/records_internal.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::data {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

bool continuation_byte(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

// Python's common prefix of two str: the bytes both start with, cut back to a character boundary (the first
// differing character may share its leading bytes).
size_t common_text_prefix(std::string_view a, std::string_view b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  while (n > 0 && n < a.size() && n < b.size() && continuation_byte(a[n])) --n;
  return n;
}

size_t common_id_prefix(const Ids& a, const Ids& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin()).first -
                             a.begin());
}

// ---- Reading -----------------------------------------------------------------------------------------------------

// chosen or rejected: present, and a string or a list (TRL's is_conversational tells them apart by the list).
const json& answer_field(const json& record, const std::string& key) {
  if (!record.contains(key)) {
    throw RecordError(key, "missing field '" + key +
                               "' (a preference record holds prompt, chosen and rejected, or only chosen and rejected "
                               "that start with the same prompt)");
  }
  const json& v = record[key];
  if (!v.is_string() && !v.is_array()) {
    throw RecordError(key, "field '" + key + "' must be a string or a list of messages, got " + v.type_name());
  }
  return v;
}

// trl.data_utils.extract_prompt on two texts: the index of the first differing character, moved one back when the
// character before it is a space (the space starts the completions). When neither differs before the shorter one
// ends, TRL's loop runs out and leaves the index at the shorter one's last character. The prompt is what lies before.
size_t split_texts(const std::string& chosen, const std::string& rejected, const PreferenceOptions& o) {
  if (chosen.empty() || rejected.empty()) {
    const std::string& key = chosen.empty() ? o.chosen_field : o.rejected_field;
    throw RecordError(key, "field '" + key + "' is empty");
  }
  const size_t n = common_text_prefix(chosen, rejected);
  if (n == std::min(chosen.size(), rejected.size())) {  // no difference: the start of the shorter's last character
    const std::string& shorter = chosen.size() <= rejected.size() ? chosen : rejected;
    size_t last = shorter.size() - 1;
    while (last > 0 && continuation_byte(shorter[last])) --last;
    return last;
  }
  return n > 0 && chosen[n - 1] == ' ' ? n - 1 : n;
}

// extract_prompt on two conversations: the first message that differs (compared as whole objects, as Python
// compares dicts), or the shorter one's last message when none does.
size_t split_conversations(const json& chosen, const json& rejected) {
  const size_t n = std::min(chosen.size(), rejected.size());
  for (size_t i = 0; i < n; ++i) {
    if (chosen[i] != rejected[i]) return i;
  }
  return n - 1;
}

jinja::Value slice(const jinja::Value& messages, size_t begin, size_t end) {
  return jinja::Value(messages.begin() + static_cast<std::ptrdiff_t>(begin),
                      messages.begin() + static_cast<std::ptrdiff_t>(end));
}

RecordOptions message_options(const PreferenceOptions& o) {
  RecordOptions ro;
  ro.format = Format::kChat;
  ro.fields = o.fields;
  ro.roles = o.roles;
  return ro;
}

// An implicit prompt split off both answers (maybe_extract_prompt's extract_prompt).
void extract_prompt(const json& chosen, const json& rejected, const PreferenceOptions& o, PreferenceRecord& rec) {
  rec.implicit_prompt = true;
  const std::string no_prompt = "chosen and rejected share no prompt: they differ from the first " +
                                std::string(rec.conversational ? "message" : "character") + " (give a \"" +
                                o.prompt_field + "\" field, or chosen and rejected that start alike)";
  if (rec.conversational) {
    const size_t at = split_conversations(chosen, rejected);
    if (at == 0) throw RecordError(o.chosen_field, no_prompt);
    rec.prompt = slice(rec.chosen, 0, at);
    rec.chosen = slice(rec.chosen, at, rec.chosen.size());
    rec.rejected = slice(rec.rejected, at, rec.rejected.size());
    return;
  }
  const auto& c = chosen.get_ref<const std::string&>();
  const auto& r = rejected.get_ref<const std::string&>();
  const size_t at = split_texts(c, r, o);
  if (at == 0) throw RecordError(o.chosen_field, no_prompt);
  rec.prompt = c.substr(0, at);
  rec.chosen = c.substr(at);
  rec.rejected = r.substr(at);
}

// ---- Rendering ---------------------------------------------------------------------------------------------------

// A text to tokenize, with the spans that must stay text (message contents, see split_special_in_content).
struct Text {
  std::string text;
  std::vector<std::pair<size_t, size_t>> content;
};

Text prefix(const Text& t, size_t n) {
  Text out{t.text.substr(0, n), {}};
  for (const auto& [b, e] : t.content) {
    if (b < n) out.content.emplace_back(b, std::min(e, n));
  }
  return out;
}

jinja::Value joined(const jinja::Value& a, const jinja::Value& b) {
  jinja::Value out = a;
  for (const auto& m : b) out.push_back(m);
  return out;
}

const chat::JinjaChat& chat_of(const PreferenceOptions& o) {
  if (o.chat == nullptr) {
    throw ConfigError("conversational preference records need a chat template",
                      "use a model (or tokenizer folder) with a chat template, or a built-in template's Jinja "
                      "(chat::chat_template_jinja)");
  }
  return *o.chat;
}

// apply_chat_template(messages, add_generation_prompt=gen) as text; a template error is the record's.
Text render(const PreferenceOptions& o, const jinja::Value& messages, bool gen, const std::string& field) {
  try {
    auto r = chat_of(o).render(messages, gen, /*last_only=*/false);
    return {std::move(r.text), std::move(r.content)};
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {  // the template's raise_exception (e.g. roles out of order)
    throw RecordError(field, e.what());
  }
}

// apply_chat_template(continue_final_message=True): the conversation rendered up to the end of its last message's
// content, found through a tag appended to it as transformers does.
Text render_continued(const PreferenceOptions& o, jinja::Value messages) {
  static const std::string kTag = "CONTINUE_FINAL_MESSAGE_TAG ";
  const std::string tag(kTag.data(), kTag.size() - 1);
  std::string final_message = messages.back().at("content").get<std::string>();
  messages.back()["content"] = final_message + kTag;
  Text t = render(o, messages, false, o.prompt_field);
  const auto first = final_message.find_first_not_of(" \t\n\r\f\v");
  final_message = first == std::string::npos ? "" : final_message.substr(first);
  final_message.erase(final_message.find_last_not_of(" \t\n\r\f\v") + 1);
  const size_t at = t.text.rfind(tag);
  if (at == std::string::npos || t.text.find(final_message) == std::string::npos) {
    throw RecordError(o.prompt_field,
                      "the chat template drops part of the prompt's final assistant message, so it "
                      "cannot be continued");
  }
  size_t end = at;
  if (t.text.compare(at, kTag.size(), kTag) != 0) {  // the template trimmed the message: trim as transformers does
    while (end > 0 && std::isspace(static_cast<unsigned char>(t.text[end - 1]))) --end;
  }
  return prefix(t, end);
}

Ids ids_of(const Text& t, bool chat, const PreferenceOptions& o, const tok::Tokenizer& tok) {
  if (chat) {
    const chat::RenderedChat r{t.text, {}, t.content};
    return chat_of(o).tokenize(r, o.split_special_in_content).tokens;
  }
  const auto ids = tok.encode_with_offsets(t.text).ids;  // tokenizer(text): spelled special tokens are tokens
  return {ids.begin(), ids.end()};
}

// The ids of the prompt alone and of prompt + chosen, prompt + rejected, before truncation.
struct Sequences {
  Ids prompt, chosen, rejected;
};

void check_distinct(const Sequences& s, const PreferenceOptions& o) {
  if (s.chosen == s.rejected) {
    throw RecordError(o.rejected_field,
                      "chosen and rejected give the same tokens (the template or the tokenizer "
                      "erases how they differ)");
  }
}

// ---- DPOTrainer --------------------------------------------------------------------------------------------------

// _prepare_dataset's tokenize_fn. Strings: tokenizer(text) with its BOS, after add_eos appended the EOS text to each
// completion not ending with it. Conversations: apply_chat_template(tokenize=True), the prompt alone with the
// generation prompt whatever its last role.
Sequences dpo_sequences(const PreferenceRecord& rec, const PreferenceOptions& o, const tok::Tokenizer& tok) {
  if (rec.conversational) {
    auto ids = [&](const jinja::Value& m, bool gen, const std::string& field) {
      return ids_of(render(o, m, gen, field), true, o, tok);
    };
    return {ids(rec.prompt, true, o.prompt_field), ids(joined(rec.prompt, rec.chosen), false, o.chosen_field),
            ids(joined(rec.prompt, rec.rejected), false, o.rejected_field)};
  }
  const std::string eos = tok.eos_id() >= 0 ? tok.id_to_piece(tok.eos_id()) : "";
  const auto& prompt = rec.prompt.get_ref<const std::string&>();
  auto ids = [&](const std::string& completion, bool add_eos) {
    Ids out;
    if (o.add_bos && tok.bos_id() >= 0) out.push_back(static_cast<int32_t>(tok.bos_id()));
    const bool eos_needed = add_eos && !eos.empty() && !ends_with(completion, eos);
    const Ids text = ids_of({prompt + completion + (eos_needed ? eos : ""), {}}, false, o, tok);
    out.insert(out.end(), text.begin(), text.end());
    return out;
  };
  return {ids("", false), ids(rec.chosen.get<std::string>(), true), ids(rec.rejected.get<std::string>(), true)};
}

// One sequence of DataCollatorForPreference: completion from `start`, cut to max_length by truncation_mode.
chat::TokenizedSample dpo_sequence(const Ids& ids, size_t start, const PreferenceOptions& o, const std::string& field) {
  if (ids.size() <= start) {
    throw RecordError(field, "the " + field + " completion adds no token to the prompt");
  }
  chat::TokenizedSample s;
  s.tokens = ids;
  s.loss.assign(ids.size(), 0);
  std::fill(s.loss.begin() + static_cast<std::ptrdiff_t>(start), s.loss.end(), 1);
  const auto max = static_cast<size_t>(o.max_length);
  if (max == 0 || ids.size() <= max) return s;
  if (o.truncation == PreferenceTruncation::kKeepEnd) {
    const auto cut = static_cast<std::ptrdiff_t>(ids.size() - max);
    s.tokens.erase(s.tokens.begin(), s.tokens.begin() + cut);
    s.loss.erase(s.loss.begin(), s.loss.begin() + cut);
    return s;
  }
  if (start >= max) {  // TRL filters these pairs out before collating
    throw RecordError(o.prompt_field, fmt::format("the prompt has {} tokens: max_length {} keeps no completion token "
                                                  "(raise max_length, or skip such pairs with data.on_error: skip)",
                                                  start, max));
  }
  s.tokens.resize(max);
  s.loss.resize(max);
  return s;
}

// The completion starts where the prompt's ids stop agreeing with either sequence's (common_prefix_length), so a
// prompt token that merges with the completion, or a generation prompt the full conversation renders otherwise,
// belongs to the completion.
PreferencePair dpo_pair(const PreferenceRecord& rec, const PreferenceOptions& o, const tok::Tokenizer& tok) {
  const Sequences s = dpo_sequences(rec, o, tok);
  check_distinct(s, o);
  const size_t start = std::min(common_id_prefix(s.prompt, s.chosen), common_id_prefix(s.prompt, s.rejected));
  return {dpo_sequence(s.chosen, start, o, o.chosen_field), dpo_sequence(s.rejected, start, o, o.rejected_field)};
}

// ---- CPOTrainer / ORPOTrainer ------------------------------------------------------------------------------------

// maybe_apply_chat_template: the prompt rendered with the generation prompt (last role user or tool) or continued
// (assistant), cut to what it shares with both rendered conversations; each completion is the rest of its own.
struct CpoTexts {
  Text prompt, chosen_full, rejected_full;  // the prompt, prompt + chosen, prompt + rejected
};

CpoTexts cpo_chat_texts(const PreferenceRecord& rec, const PreferenceOptions& o) {
  const std::string role = rec.prompt.back().at("role").get<std::string>();
  Text prompt;
  if (role == "user" || role == "tool") {
    prompt = render(o, rec.prompt, true, o.prompt_field);
  } else if (role == "assistant") {
    prompt = render_continued(o, rec.prompt);
  } else {
    throw RecordError(o.prompt_field, "the prompt ends with a '" + role +
                                          "' message; CPO/ORPO need it to end with a user, tool or assistant message");
  }
  CpoTexts t{{},
             render(o, joined(rec.prompt, rec.chosen), false, o.chosen_field),
             render(o, joined(rec.prompt, rec.rejected), false, o.rejected_field)};
  size_t n = common_text_prefix(prompt.text, t.chosen_full.text);
  n = std::min(n, common_text_prefix(prompt.text.substr(0, n), t.rejected_full.text));
  t.prompt = prefix(t.chosen_full, n);
  return t;
}

CpoTexts cpo_texts(const PreferenceRecord& rec, const PreferenceOptions& o) {
  if (rec.conversational) return cpo_chat_texts(rec, o);
  const auto& prompt = rec.prompt.get_ref<const std::string&>();
  return {{prompt, {}}, {prompt + rec.chosen.get<std::string>(), {}}, {prompt + rec.rejected.get<std::string>(), {}}};
}

// build_tokenized_answer: prompt + answer tokenized as one; the prompt's part is the prompt's own ids, one token
// shorter when the last of them merged with the answer.
struct Answer {
  Ids prompt, answer;
};

Answer split_answer(const Ids& prompt, const Ids& full, const std::string& field) {
  if (full.size() < prompt.size()) {
    throw RecordError(field, "the prompt followed by " + field + " has fewer tokens than the prompt alone");
  }
  size_t start = prompt.size();
  if (!std::equal(prompt.begin(), prompt.end(), full.begin())) --start;
  const auto at = full.begin() + static_cast<std::ptrdiff_t>(start);
  return {Ids(full.begin(), at), Ids(at, full.end())};
}

// tokenize_row's checks: the two prompts may differ only by the merged last token.
void check_prompts(const Answer& c, const Answer& r, const PreferenceOptions& o) {
  size_t differing = 0;
  for (size_t i = 0; i < std::min(c.prompt.size(), r.prompt.size()); ++i) differing += c.prompt[i] != r.prompt[i];
  const size_t length_gap = std::max(c.prompt.size(), r.prompt.size()) - std::min(c.prompt.size(), r.prompt.size());
  if (differing > 1 || length_gap > 1) {
    throw RecordError(o.rejected_field,
                      "the prompt tokenizes differently before chosen and before rejected, by more "
                      "than its last token (TRL's CPO/ORPO refuse such pairs)");
  }
}

// add_bos_token_if_needed, add_eos_token_if_needed, then the completion cut so that the pair fits max_length.
chat::TokenizedSample cpo_sequence(Answer a, const PreferenceOptions& o, const tok::Tokenizer& tok) {
  const auto bos = static_cast<int32_t>(tok.bos_id());
  if (o.add_bos && bos >= 0 && (a.prompt.empty() || a.prompt.front() != bos)) a.prompt.insert(a.prompt.begin(), bos);
  const auto eos = static_cast<int32_t>(tok.eos_id());
  if (eos >= 0 && (a.answer.empty() || a.answer.back() != eos)) a.answer.push_back(eos);
  const auto max = static_cast<size_t>(o.max_length);
  if (max > 0 && a.prompt.size() + a.answer.size() > max) {
    a.answer.resize(max > a.prompt.size() ? max - a.prompt.size() : 0);
  }
  if (a.answer.empty()) {  // TRL keeps the pair with a warning; its average log-prob is then 0 / 0
    throw RecordError(o.prompt_field, fmt::format("the prompt has {} tokens: max_length {} keeps no completion token "
                                                  "(raise max_length, or skip such pairs with data.on_error: skip)",
                                                  a.prompt.size(), max));
  }
  chat::TokenizedSample s;
  s.tokens = a.prompt;
  s.tokens.insert(s.tokens.end(), a.answer.begin(), a.answer.end());
  s.loss.assign(a.prompt.size(), 0);
  s.loss.resize(s.tokens.size(), 1);
  return s;
}

PreferencePair cpo_pair(const PreferenceRecord& rec, const PreferenceOptions& o, const tok::Tokenizer& tok) {
  const CpoTexts t = cpo_texts(rec, o);
  const Sequences s{ids_of(t.prompt, rec.conversational, o, tok), ids_of(t.chosen_full, rec.conversational, o, tok),
                    ids_of(t.rejected_full, rec.conversational, o, tok)};
  check_distinct(s, o);
  const Answer c = split_answer(s.prompt, s.chosen, o.chosen_field);
  const Answer r = split_answer(s.prompt, s.rejected, o.rejected_field);
  check_prompts(c, r, o);
  return {cpo_sequence(c, o, tok), cpo_sequence(r, o, tok)};
}

}  // namespace

PreferenceRecord parse_preference(std::string_view line, const PreferenceOptions& o) {
  const json j = parse_record_object(line);
  const json& chosen = answer_field(j, o.chosen_field);
  const json& rejected = answer_field(j, o.rejected_field);
  PreferenceRecord rec;
  rec.conversational = chosen.is_array();
  if (rejected.is_array() != rec.conversational) {
    throw RecordError(o.rejected_field, "'" + o.chosen_field + "' is a " +
                                            (rec.conversational ? "list of messages" : "string") + " but '" +
                                            o.rejected_field + "' is not; both must be of one kind");
  }
  if (chosen == rejected) {
    throw RecordError(o.rejected_field, "chosen and rejected are the same; a pair needs two different answers");
  }
  const RecordOptions ro = message_options(o);
  auto value = [&](const json& v, const std::string& field) {
    return rec.conversational ? parse_message_list(v, field, ro, /*model_template=*/true)
                              : jinja::Value(v.get<std::string>());
  };
  rec.chosen = value(chosen, o.chosen_field);
  rec.rejected = value(rejected, o.rejected_field);
  // maybe_extract_prompt: a prompt of the answers' kind is the prompt; otherwise it is split off the answers.
  const auto prompt = j.find(o.prompt_field);
  if (prompt == j.end() || prompt->is_array() != rec.conversational) {
    extract_prompt(chosen, rejected, o, rec);
    return rec;
  }
  if (!prompt->is_string() && !prompt->is_array()) {
    throw RecordError(o.prompt_field, "field '" + o.prompt_field + "' must be a string or a list of messages, got " +
                                          prompt->type_name());
  }
  rec.prompt = value(*prompt, o.prompt_field);
  return rec;
}

PreferencePair tokenize_preference(const PreferenceRecord& record, const PreferenceOptions& o,
                                   const tok::Tokenizer& tokenizer) {
  if (o.max_length < 0) {
    throw ConfigError(fmt::format("max_length must be >= 0 (0: no limit), got {}", o.max_length));
  }
  return o.style == PreferenceStyle::kDpo ? dpo_pair(record, o, tokenizer) : cpo_pair(record, o, tokenizer);
}

PreferencePair tokenize_preference(std::string_view line, const PreferenceOptions& o, const tok::Tokenizer& tokenizer) {
  return tokenize_preference(parse_preference(line, o), o, tokenizer);
}

PreferenceData read_preference_file(const std::filesystem::path& path, const PreferenceOptions& o,
                                    const tok::Tokenizer& tokenizer, OnError on_error) {
  RecordReader reader(path);
  BadRecords bad(path, on_error);
  PreferenceData out;
  std::string record;
  int64_t line = 0, records = 0;
  while (reader.next(record, line)) {
    ++records;
    try {
      out.pairs.push_back(tokenize_preference(record, o, tokenizer));
      out.lines.push_back(line);
    } catch (const RecordError& e) {
      bad.add(line, e);
    }
  }
  bad.finish(records);
  out.skipped = bad.count();
  warn_skipped_lines(path.string(), bad.count(), bad.lines());
  return out;
}

}  // namespace ft::data
