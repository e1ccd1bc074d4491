// Preference pairs for the DPO family: records read as TRL 1.16 defines them, tokenized as its trainers tokenize
// them, and batched with the completion tokens marked for the objective.
//
// Records (JSON Lines or a JSON array, one object per pair):
// - standard: "prompt", "chosen" and "rejected" are strings;
// - conversational: they are lists of messages (the prompt the shared turns, chosen and rejected the final
//   assistant turn(s));
// - implicit prompt: only "chosen" and "rejected", whole texts or conversations that start alike. The prompt is
//   their shared start, split off as trl.data_utils.extract_prompt does (maybe_extract_prompt: also when "prompt"
//   is there but is not of the same kind as "chosen").
//
// TRL 1.16 tokenizes pairs in two ways, and PreferenceStyle picks one: DPOTrainer's (DPO, robust DPO, IPO) and
// the tokenize_row of CPOTrainer / ORPOTrainer (SimPO, ORPO). Both give for each pair the ids of prompt + chosen
// and prompt + rejected and the tokens scored, which is all an objective needs.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "chat/templates.h"
#include "config/config.h"
#include "data/batch.h"
#include "jinja/template.h"

namespace ft::tok {
class Tokenizer;
}
namespace ft::chat {
class JinjaChat;
}
namespace ft::data {

enum class PreferenceStyle {
  // trl.DPOTrainer._prepare_dataset: prompt, prompt + chosen and prompt + rejected tokenized each on its own
  // (conversations through apply_chat_template(tokenize=True), the prompt with the generation prompt; strings as
  // tokenizer(text) does, after the EOS text is appended to each completion that does not end with it). The
  // completion starts where the prompt's ids and both sequences' ids stop agreeing. Truncation: max_length with
  // truncation_mode, over the whole sequence.
  kDpo,
  // trl.experimental CPOTrainer / ORPOTrainer: maybe_apply_chat_template renders conversations to strings (the
  // prompt with the generation prompt, or continuing a final assistant message; each completion the rest of its
  // rendered conversation), then tokenize_row: the prompt's ids end one token early where the prompt's last token
  // merges with the completion, BOS is put first unless there, the EOS id appended unless last, and the completion
  // cut so that prompt + completion fit max_length (the prompt is never cut).
  kCpoOrpo,
};

// DPOConfig.truncation_mode: which end of prompt + completion stays when it is longer than max_length.
enum class PreferenceTruncation {
  kKeepStart,  // TRL's default; a pair whose prompt alone fills max_length keeps no completion token
  kKeepEnd,    // deprecated in TRL 1.16 but still applied
};

// The settings of a preference dataset. Defaults are TRL 1.16's.
struct PreferenceOptions {
  PreferenceStyle style = PreferenceStyle::kDpo;
  // The longest sequence (prompt + completion) in tokens: DPOConfig/CPOConfig/ORPOConfig.max_length, 1024 in TRL.
  // 0: no limit (DPOConfig max_length=None; CPO/ORPO turn None into 512, so pass 512 to match them there).
  int64_t max_length = 1024;
  PreferenceTruncation truncation = PreferenceTruncation::kKeepStart;  // kDpo only (CPO/ORPO cut the completion)
  // Field names: TRL's. Messages use data.fields' role/content names (`fields`) and data.roles' mapping (`roles`).
  std::string prompt_field = "prompt";
  std::string chosen_field = "chosen";
  std::string rejected_field = "rejected";
  DataFields fields;
  std::map<std::string, std::string> roles;
  // Conversational records: the model's chat template (chat_template_jinja gives the built-in ones). A
  // conversational record without one is a ConfigError.
  const chat::JinjaChat* chat = nullptr;
  // The tokenizer's BOS where TRL puts it: kDpo, standard records: first, as tokenizer(text) adds it (set false for a
  // tokenizer whose post-processor adds none although it has a BOS token; conversations: the template decides);
  // kCpoOrpo: first in every pair unless the prompt starts with it (TRL's add_bos_token_if_needed).
  bool add_bos = true;
  // Conversations: text in a message that spells a special token stays text, as the project's chat records treat it
  // (JinjaChat::tokenize). TRL's ids are apply_chat_template's, where such text becomes the special token: false
  // gives exactly those. Both agree whenever no message spells one.
  bool split_special_in_content = true;
};

// One record after the prompt is known: strings (standard) or normalized message lists (conversational, as
// jinja::Value arrays of {"role", "content", ...}).
struct PreferenceRecord {
  bool conversational = false;
  bool implicit_prompt = false;  // the prompt was split off chosen and rejected (extract_prompt)
  jinja::Value prompt, chosen, rejected;
};

// The two sequences of a pair as the model sees them. loss: 1 on the completion tokens TRL scores (DPO's
// completion_mask, CPO/ORPO's labels != -100), 0 on the prompt. Truncation is applied.
struct PreferencePair {
  chat::TokenizedSample chosen;    // prompt + chosen completion
  chat::TokenizedSample rejected;  // prompt + rejected completion
};

// Reads one record (a JSON Lines line or one element of a JSON array) and splits off an implicit prompt. Throws
// RecordError (naming the field) for invalid JSON, a missing "chosen"/"rejected", a field that is neither a string
// nor a list of messages, chosen and rejected of different kinds or equal, a bad message, and an implicit pair
// that shares no prompt.
PreferenceRecord parse_preference(std::string_view line, const PreferenceOptions& options);

// Renders and tokenizes a record in options.style. Throws RecordError for a template error, a completion that
// adds no token, chosen and rejected that give the same ids, a pair left without a completion token by truncation
// (TRL drops these silently with keep_start: data.on_error: skip does the same here), and the CPO/ORPO refusals
// (a prompt ending in a system message, prompts that tokenize apart by more than the merged last token).
// ConfigError for a conversational record without options.chat, or max_length < 0.
PreferencePair tokenize_preference(const PreferenceRecord& record, const PreferenceOptions& options,
                                   const tok::Tokenizer& tokenizer);
PreferencePair tokenize_preference(std::string_view line, const PreferenceOptions& options,
                                   const tok::Tokenizer& tokenizer);

// The pairs of a file, in order, with the line each record starts on.
struct PreferenceData {
  std::vector<PreferencePair> pairs;
  std::vector<int64_t> lines;  // 1-based, one per pair
  int64_t skipped = 0;         // bad records skipped under OnError::kSkip (warned once)
};

// Reads a JSON Lines file or a JSON array (RecordReader) and tokenizes every record. A bad record throws
// "<file>:<line>: <what> (field '<f>')" under OnError::kFail, or is skipped and counted under kSkip; a file without
// records is an error (kFail) or a warning.
PreferenceData read_preference_file(const std::filesystem::path& path, const PreferenceOptions& options,
                                    const tok::Tokenizer& tokenizer, OnError on_error);

// P pairs as one forward: 2P sequences in TRL's order (Batch::pairs), so chosen and rejected share the forward and
// the reference forward. Without packing: one sequence per row, right-padded to the longest ([2P, T],
// DataCollatorForPreference's layout); with packing: all of them back to back in one row ([1, sum of lengths]) with
// segment_ids, cu_seqlens and position ids restarting per sequence, so no sequence attends to another. labels: the
// next token where it is a completion token, else -100. num_target_tokens counts them; num_samples = 2P.
// Builds the tensors of one batch (CPU), inputs padded with pad_id. Every pair must hold a completion token.
Batch collate_preference(const std::vector<const PreferencePair*>& pairs, bool packing, int64_t pad_id,
                         bool pin_memory = false);

}  // namespace ft::data
