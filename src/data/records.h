// One JSON Lines record -> loss-tagged segments, per dataset format. Errors name the offending field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "chat/templates.h"
#include "config/config.h"

namespace ft::tok {
class Tokenizer;
}
namespace ft::chat {
class JinjaChat;
}
namespace ft::data {

// The source formats of data.train[].format (pretokenized is binary and handled by the dataset).
using Format = SourceFormat;

// A bad record; the dataset adds file:line. `field` is the JSON key at fault (empty for whole-line problems).
class RecordError : public std::runtime_error {
 public:
  RecordError(std::string field, const std::string& message) : std::runtime_error(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// data.on_error for the records of one file, the same for everything that reads the data (the dataset, tokenizer
// training at the start of a run): kFail throws a bad record as "<file>:<line>: <what> (field '<f>')" with the
// hint; kSkip counts it and keeps the first few line numbers for the warning.
class BadRecords {
 public:
  static constexpr size_t kMaxLines = 5;

  BadRecords(std::filesystem::path path, OnError on_error) : path_(std::move(path)), on_error_(on_error) {}
  void add(int64_t line_no, const RecordError& e);
  // After the last record: a file without records is an error (kFail) or a warning (kSkip).
  void finish(int64_t records) const;

  int64_t count() const { return count_; }
  const std::vector<int64_t>& lines() const { return lines_; }
  // The first skipped record's error, as kFail would have reported it ("" when none was skipped).
  const std::string& first_error() const { return first_error_; }

 private:
  std::filesystem::path path_;
  OnError on_error_;
  int64_t count_ = 0;
  std::vector<int64_t> lines_;
  std::string first_error_;
};

// "<path>: skipped N bad line(s), first at line(s) a, b" as a warning (nothing when `count` is 0).
void warn_skipped_lines(const std::string& path, int64_t count, const std::vector<int64_t>& lines);

struct RecordOptions {
  Format format = Format::kPromptCompletion;
  DataFields fields;
  std::string template_name = "plain";
  const chat::JinjaChat* chat =
      nullptr;                      // chat records: the model's own template (data.template auto) instead of a built-in
  bool last_turn_only = false;      // chat through `chat`: loss on the last assistant turn only (data.train_on: last)
  std::map<std::string, std::string> roles;  // chat: dataset role or speaker name -> system|user|assistant|tool
  std::string system_prompt;  // chat: system message for conversations without one (empty: none)
  bool add_bos = true;  // text / prompt_completion / alpaca: prepend BOS (chat: the template decides)
  bool add_eos = true;  // text: append EOS; prompt_completion / alpaca: append EOS to the completion (a target)
};

// Parses one record (a JSON Lines line or one element of a JSON array). Loss: text = every token;
// prompt_completion/alpaca = the completion and its EOS; chat = assistant turns. Chat records hold OpenAI-style
// messages (data.fields.messages/role/content), ShareGPT's `conversations` of {from: human|gpt|system|tool, value},
// or a single turn as Alpaca (instruction, optional input, output) or prompt/completion fields; options.roles maps
// other role names; a string `system` field (else options.system_prompt) becomes the first message unless the
// conversation starts with one. Alpaca prompts read
// "### Instruction:\n{instruction}\n\n[### Input:\n{input}\n\n]### Response:\n".
// Throws RecordError (invalid UTF-8 or JSON, a missing field, a wrong type, an unknown role).
std::vector<chat::Segment> parse_record(std::string_view line, const RecordOptions& options);

// Parses and tokenizes one non-blank line: chat records through options.chat when it is set (rendered and
// tokenized as apply_chat_template does), everything else through parse_record and tokenize_segments.
chat::TokenizedSample tokenize_record(std::string_view line, const RecordOptions& options,
                                      const tok::Tokenizer& tokenizer);

}  // namespace ft::data
