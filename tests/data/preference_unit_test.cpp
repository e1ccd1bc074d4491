// Preference records without a reference: the refusals (each naming file:line and the field) and the batch layout.
// The ids themselves are checked against TRL in preference_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>

#include "chat/chat_template.h"
#include "data/preference.h"
#include "data/preference_batch.h"
#include "data/preference_dataset.h"
#include "data/records.h"
#include "data_test_util.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace ft::test {
namespace {

using data::PreferenceOptions;

const tok::Tokenizer& tok() {
  static const auto t = load_test_tokenizer();
  return *t;
}

// The built-in chatml template as a model template (its markers are pieces of the test tokenizer).
const chat::JinjaChat& chatml() {
  static const chat::JinjaChat chat({chat::chat_template_jinja("chatml"), "chatml"}, tok());
  return chat;
}

PreferenceOptions with_chat() {
  PreferenceOptions o;
  o.chat = &chatml();
  return o;
}

const char* kGood = R"({"prompt": "Add: 472 + 95\nAnswer:", "chosen": " 567", "rejected": " 568"})";

// A file of a good record, a bad one on line 3 and another good one: with on_error fail the error names file:3 and
// the field, and says `what`; with skip the bad line is counted and both good pairs stay.
void expect_bad_line(const std::string& bad, const std::string& field, const std::string& what,
                     const PreferenceOptions& o = with_chat()) {
  TempDir dir("ft-pref");
  const auto path = dir / "pairs.jsonl";
  write_file(path, std::string(kGood) + "\n\n" + bad + "\n" + kGood + "\n");
  try {
    data::read_preference_file(path, o, tok(), OnError::kFail);
    ADD_FAILURE() << "expected '" << what << "' for " << bad;
  } catch (const ConfigError& e) {
    ADD_FAILURE() << "a bad record must not be a ConfigError: " << e.what();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path.string() + ":3: "), std::string::npos) << msg;
    if (!field.empty()) {
      EXPECT_NE(msg.find("(field '" + field + "')"), std::string::npos) << msg;
    }
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_NE(e.hint().find("data.on_error: skip"), std::string::npos) << e.hint();
  }
  const auto skipped = data::read_preference_file(path, o, tok(), OnError::kSkip);
  EXPECT_EQ(skipped.skipped, 1) << bad;
  EXPECT_EQ(skipped.lines, (std::vector<int64_t>{1, 4})) << bad;
}

TEST(PreferenceRecords, MissingFieldIsNamed) {
  expect_bad_line(R"({"prompt": "p", "chosen": " a"})", "rejected", "missing field 'rejected'");
  expect_bad_line(R"({"prompt": "p", "rejected": " a"})", "chosen", "missing field 'chosen'");
  PreferenceOptions renamed = with_chat();
  renamed.chosen_field = "better";
  try {
    data::parse_preference(R"({"prompt": "p", "chosen": " a", "rejected": " b"})", renamed);
    ADD_FAILURE() << "expected a missing 'better'";
  } catch (const data::RecordError& e) {
    EXPECT_EQ(e.field(), "better");
  }
  EXPECT_EQ(data::parse_preference(R"({"prompt": "p", "better": " a", "rejected": " b"})", renamed).chosen, " a");
}

TEST(PreferenceRecords, WrongTypesAreNamed) {
  expect_bad_line(R"({"prompt": "p", "chosen": 5, "rejected": " b"})", "chosen",
                  "field 'chosen' must be a string or a list of messages, got number");
  expect_bad_line(R"({"prompt": 7, "chosen": " a", "rejected": " b"})", "prompt",
                  "field 'prompt' must be a string or a list of messages, got number");
  expect_bad_line(R"({"prompt": "p", "chosen": " a", "rejected": [{"role": "assistant", "content": "b"}]})", "rejected",
                  "both must be of one kind");
  expect_bad_line(
      R"({"prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "assistant"}], "rejected": [{"role": "assistant", "content": "b"}]})",
      "chosen[0].content", "missing field 'chosen[0].content'");
  expect_bad_line(
      R"({"prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "bot", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]})",
      "chosen[0].role", "unknown role 'bot'");
  expect_bad_line(
      R"({"prompt": [], "chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]})",
      "prompt", "field 'prompt' is empty");
  expect_bad_line(R"(["not", "an object"])", "", "a record must be a JSON object");
}

TEST(PreferenceRecords, ChosenEqualToRejectedIsRefused) {
  expect_bad_line(R"({"prompt": "p", "chosen": " same", "rejected": " same"})", "rejected",
                  "chosen and rejected are the same");
  expect_bad_line(
      R"({"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "rejected": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})",
      "rejected", "chosen and rejected are the same");
}

TEST(PreferenceRecords, ImplicitPairWithoutSharedPromptIsRefused) {
  expect_bad_line(R"({"chosen": "Yes.", "rejected": "No."})", "chosen",
                  "chosen and rejected share no prompt: they differ from the first character");
  // A shared leading space alone moves back to nothing (TRL's space rule).
  expect_bad_line(R"({"chosen": " Yes.", "rejected": " No."})", "chosen", "share no prompt");
  expect_bad_line(
      R"({"chosen": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "x"}], "rejected": [{"role": "user", "content": "b"}, {"role": "assistant", "content": "x"}]})",
      "chosen", "they differ from the first message");
}

TEST(PreferenceRecords, NoCompletionTokenAfterTruncationIsRefused) {
  const std::string long_prompt =
      R"({"prompt": "Zyxw vutsr qponm lkjih gfedc ba, 0987654321! Quick brown dogs?", "chosen": " 567", "rejected": " 568"})";
  auto prompt_tokens = [](const std::string& rec) {
    const auto pair = data::tokenize_preference(rec, PreferenceOptions{}, tok());
    return static_cast<int64_t>(std::count(pair.chosen.loss.begin(), pair.chosen.loss.end(), 0));
  };
  ASSERT_LT(prompt_tokens(kGood), prompt_tokens(long_prompt));
  PreferenceOptions o = with_chat();
  o.max_length = prompt_tokens(long_prompt);  // the long prompt fills it; the good one leaves room
  for (const auto style : {data::PreferenceStyle::kDpo, data::PreferenceStyle::kCpoOrpo}) {
    o.style = style;
    expect_bad_line(long_prompt, "prompt", "keeps no completion token", o);
  }
  // keep_end keeps the completion's end: the same pair is kept, all of it scored.
  o.style = data::PreferenceStyle::kDpo;
  o.truncation = data::PreferenceTruncation::kKeepEnd;
  o.max_length = 3;
  const auto pair = data::tokenize_preference(long_prompt, o, tok());
  EXPECT_EQ(pair.chosen.tokens.size(), 3u);
  EXPECT_EQ(pair.chosen.tokens.back(), tok().eos_id());
  EXPECT_EQ(pair.chosen.loss.back(), 1);
}

TEST(PreferenceRecords, ConversationWithoutTemplateIsAConfigError) {
  const std::string rec =
      R"({"prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]})";
  EXPECT_THROW(data::tokenize_preference(rec, PreferenceOptions{}, tok()), ConfigError);
  EXPECT_NO_THROW(data::tokenize_preference(rec, with_chat(), tok()));
}

TEST(PreferenceRecords, CpoOrpoRefusesAPromptEndingWithASystemMessage) {
  PreferenceOptions o = with_chat();
  o.style = data::PreferenceStyle::kCpoOrpo;
  expect_bad_line(
      R"({"prompt": [{"role": "system", "content": "Be nice."}], "chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]})",
      "prompt", "the prompt ends with a 'system' message", o);
}

// chatml: the completion is the assistant turn after the generation prompt, with its <|im_end|>; the user turn and
// the generation prompt are not scored.
TEST(PreferenceRecords, ConversationScoresTheAnswerTurn) {
  const auto pair = data::tokenize_preference(
      R"({"prompt": [{"role": "user", "content": "Add: 472 + 95"}], "chosen": [{"role": "assistant", "content": "567"}], "rejected": [{"role": "assistant", "content": "568"}]})",
      with_chat(), tok());
  std::vector<int64_t> scored, unscored;
  for (size_t i = 0; i < pair.chosen.tokens.size(); ++i) {
    (pair.chosen.loss[i] ? scored : unscored).push_back(pair.chosen.tokens[i]);
  }
  EXPECT_NE(tok().decode(scored, false).find("567<|im_end|>"), std::string::npos) << tok().decode(scored, false);
  const std::string prompt = tok().decode(unscored, false);
  EXPECT_NE(prompt.find("<|im_start|>user\nAdd: 472 + 95<|im_end|>"), std::string::npos) << prompt;
  EXPECT_EQ(prompt.find("567"), std::string::npos) << prompt;
}

// Packed and padded batches hold the same sequences and labels; the counts are per sequence.
TEST(PreferenceBatch, PackedAndPaddedAgree) {
  PreferenceOptions o;
  o.truncation = data::PreferenceTruncation::kKeepEnd;
  o.max_length = 3;  // the second pair loses its prompt: its first token is a completion token
  const auto a = data::tokenize_preference(kGood, PreferenceOptions{}, tok());
  const auto b = data::tokenize_preference(
      R"({"prompt": "The quick brown fox", "chosen": " jumps over", "rejected": " sleeps"})", o, tok());
  const std::vector<const data::PreferencePair*> pairs{&a, &b};
  const auto padded = data::collate_preference(pairs, false, /*pad_id=*/-7);
  const auto packed = data::collate_preference(pairs, true, -7);
  const std::vector<const chat::TokenizedSample*> seqs{&a.chosen, &b.chosen, &a.rejected, &b.rejected};
  ASSERT_EQ(padded.input_ids.size(0), 4);
  ASSERT_EQ(packed.input_ids.size(0), 1);
  EXPECT_EQ(padded.pairs->num_pairs, 2);
  EXPECT_EQ(padded.num_samples, 4);
  int64_t offset = 0, targets = 0;
  for (int64_t s = 0; s < 4; ++s) {
    const auto& seq = *seqs[static_cast<size_t>(s)];
    const auto len = static_cast<int64_t>(seq.tokens.size());
    int64_t completion = 0, target = 0;
    for (int64_t t = 0; t < padded.input_ids.size(1); ++t) {
      const bool in = t < len;
      EXPECT_EQ(padded.input_ids[s][t].item<int64_t>(), in ? seq.tokens[static_cast<size_t>(t)] : -7);
      EXPECT_EQ(padded.pairs->sequence_ids[s][t].item<int64_t>(), in ? s : -1);
      if (!in) {
        EXPECT_EQ(padded.labels[s][t].item<int64_t>(), data::kIgnoreIndex);
      }
    }
    for (int64_t t = 0; t < len; ++t) {
      const auto k = static_cast<size_t>(t);
      completion += seq.loss[k];
      const int64_t label = t + 1 < len && seq.loss[k + 1] ? seq.tokens[k + 1] : data::kIgnoreIndex;
      target += label != data::kIgnoreIndex;
      EXPECT_EQ(padded.labels[s][t].item<int64_t>(), label);
      EXPECT_EQ(packed.labels[0][offset + t].item<int64_t>(), label);
      EXPECT_EQ(packed.input_ids[0][offset + t].item<int64_t>(), seq.tokens[k]);
      EXPECT_EQ(packed.position_ids[0][offset + t].item<int64_t>(), t);
      EXPECT_EQ(packed.segment_ids[0][offset + t].item<int32_t>(), s);
      EXPECT_EQ(packed.pairs->sequence_ids[0][offset + t].item<int64_t>(), s);
    }
    EXPECT_EQ(packed.cu_seqlens[s].item<int32_t>(), offset);
    offset += len;
    targets += target;
    EXPECT_EQ(padded.pairs->completion_tokens[s].item<int64_t>(), completion);
    EXPECT_EQ(padded.pairs->target_tokens[s].item<int64_t>(), target);
    EXPECT_EQ(packed.pairs->target_tokens[s].item<int64_t>(), target);
  }
  EXPECT_EQ(packed.cu_seqlens[4].item<int32_t>(), offset);
  EXPECT_EQ(packed.input_ids.size(1), offset);
  EXPECT_EQ(padded.num_target_tokens, targets);
  EXPECT_EQ(packed.num_target_tokens, targets);
  // b lost its prompt to keep_end: every token scored, one label fewer (the first token is predicted from nothing).
  EXPECT_EQ(padded.pairs->completion_tokens[1].item<int64_t>(), 3);
  EXPECT_EQ(padded.pairs->target_tokens[1].item<int64_t>(), 2);
}

// Unpacked sequences are padded to a multiple, at most the cap and never below the longest; only padding is added.
TEST(PreferenceBatch, PaddedToAMultipleUpToTheCap) {
  const auto a = data::tokenize_preference(kGood, PreferenceOptions{}, tok());
  const std::vector<const data::PreferencePair*> pairs{&a};
  const auto exact = data::collate_preference(pairs, false, /*pad_id=*/-7);
  const int64_t longest = exact.input_ids.size(1);
  ASSERT_NE(longest % 16, 0) << "the test needs a longest sequence that is not a multiple of 16";
  const int64_t T = (longest + 15) / 16 * 16;
  const auto padded = data::collate_preference(pairs, data::CollateOptions{/*seq_len=*/1000, false, -7, 16});
  ASSERT_EQ(padded.input_ids.size(1), T);
  EXPECT_TRUE(padded.input_ids.narrow(1, 0, longest).equal(exact.input_ids));
  EXPECT_TRUE(padded.labels.narrow(1, 0, longest).equal(exact.labels));
  EXPECT_TRUE(padded.pairs->sequence_ids.narrow(1, 0, longest).equal(exact.pairs->sequence_ids));
  EXPECT_TRUE(padded.input_ids.narrow(1, longest, T - longest).eq(-7).all().item<bool>());
  EXPECT_TRUE(padded.labels.narrow(1, longest, T - longest).eq(data::kIgnoreIndex).all().item<bool>());
  EXPECT_TRUE(padded.pairs->sequence_ids.narrow(1, longest, T - longest).eq(-1).all().item<bool>());
  EXPECT_EQ(padded.num_target_tokens, exact.num_target_tokens);
  EXPECT_TRUE(padded.pairs->target_tokens.equal(exact.pairs->target_tokens));

  EXPECT_EQ(data::collate_preference(pairs, {longest + 1, false, -7, 16}).input_ids.size(1), longest + 1);
  EXPECT_EQ(data::collate_preference(pairs, {/*seq_len=*/1, false, -7, 16}).input_ids.size(1), longest);
  const auto packed = data::collate_preference(pairs, {/*seq_len=*/1000, true, -7, 16});
  EXPECT_TRUE(packed.input_ids.equal(data::collate_preference(pairs, true, -7).input_ids));
}

// The dataset caps the padding at max_length (data.seq_len), the most one sequence holds, not at the loader's
// seq_len (a packed row of two sequences).
TEST(PreferenceBatch, DatasetPadsUpToMaxLength) {
  TempDir dir("ft-pref-pad");
  write_file(dir / "pairs.jsonl", std::string(kGood) + "\n");
  PreferenceOptions o;
  o.max_length = 40;
  const auto ds = data::PreferenceDataset::build({{(dir / "pairs.jsonl").string(), SourceFormat::kPreference, 1.0}}, o,
                                                 OnError::kFail, tok());
  ASSERT_EQ(ds->seq_len(), 80);
  EXPECT_EQ(ds->collate({{0}}, {ds->seq_len(), false, 0, /*pad_multiple=*/64}).input_ids.size(1), 40);
  EXPECT_EQ(ds->collate({{0}}, {ds->seq_len(), false, 0, /*pad_multiple=*/1}).input_ids.size(1),
            data::collate_preference({&ds->pair(0)}, false, 0).input_ids.size(1));
}

}  // namespace
}  // namespace ft::test
