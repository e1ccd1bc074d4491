// Preference pairs against TRL 1.16 itself (tests/data/ref/preference_ref.py runs its extract_prompt, its
// DPOTrainer tokenization and collator, and CPO/ORPO's tokenize_row on the records below), with real vocabularies
// and chat templates (chat_ref.py's model directories: Llama 3.1, Mistral, Qwen3-style, Phi-3). The ids and the
// scored tokens of both sequences of every pair must be identical, TRL's dropped pairs and refusals must be refused
// here, and a batch must be DataCollatorForPreference's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>

#include "chat/chat_template.h"
#include "data/preference.h"
#include "data/records.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace ft::test {
namespace {

using data::PreferenceStyle;
using data::PreferenceTruncation;

// The records, one per line of the JSON Lines file both sides read. Inputs only: every expectation comes from TRL.
const std::vector<std::pair<const char*, const char*>> kRecords = {
    {"standard", R"({"prompt": "The capital of France is", "chosen": " Paris.", "rejected": " Lyon, probably."})"},
    // The prompt's trailing space merges with the completion's first token.
    {"merging prompt", R"({"prompt": "Q: 2+2 = ", "chosen": "4", "rejected": "five"})"},
    {"non-ASCII", R"({"prompt": "Übersetze ins Deutsche: cat →", "chosen": " Katze 🐈", "rejected": " Hund 🐕"})"},
    // Implicit prompts: the space before the first difference starts the completions.
    {"implicit",
     R"({"chosen": "Human: What is 2+2? Assistant: 4", "rejected": "Human: What is 2+2? Assistant: 5, or so"})"},
    // ö and ü share their first UTF-8 byte: the prompt ends before the character, not inside it.
    {"implicit non-ASCII", R"({"chosen": "Antwort: Größe", "rejected": "Antwort: Grüße"})"},
    // One answer a prefix of the other: TRL's loop ends on the shorter one's last character.
    {"implicit prefix", R"({"chosen": "Q: name a color. A: red", "rejected": "Q: name a color. A: red, green"})"},
    // Completions that end with an EOS spelling already (which one depends on the model).
    {"spelled EOS", R"({"prompt": "Say done.", "chosen": " done<|eot_id|>", "rejected": " not done</s>"})"},
    {"long prompt",
     R"({"prompt": "Read this carefully, then answer the question at the end of it with one word: which animal says moo?", "chosen": " Cow.", "rejected": " A duck, obviously."})"},
    {"conversational",
     R"({"prompt": [{"role": "user", "content": "What color is the sky?"}], "chosen": [{"role": "assistant", "content": "It is blue."}], "rejected": [{"role": "assistant", "content": "It is green."}]})"},
    {"multi-turn prompt",
     R"({"prompt": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}], "chosen": [{"role": "assistant", "content": "6."}], "rejected": [{"role": "assistant", "content": "Seven, I think."}]})"},
    {"implicit conversational",
     R"({"chosen": [{"role": "user", "content": "Where is the sun?"}, {"role": "assistant", "content": "In the sky."}], "rejected": [{"role": "user", "content": "Where is the sun?"}, {"role": "assistant", "content": "In the sea."}]})"},
    {"implicit multi-turn answers",
     R"({"chosen": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}], "rejected": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "What?"}, {"role": "user", "content": "Hi again"}, {"role": "assistant", "content": "Go away."}]})"},
    {"conversational non-ASCII",
     R"({"prompt": [{"role": "user", "content": "Übersetze: 猫がいます 🐈‍⬛"}], "chosen": [{"role": "assistant", "content": "Es gibt eine Katze. 😺"}], "rejected": [{"role": "assistant", "content": "Da ist ein Hund."}]})"},
    // A string prompt beside conversations: maybe_extract_prompt splits the conversations instead.
    {"mixed prompt",
     R"({"prompt": "Where is the sun?", "chosen": [{"role": "user", "content": "Where is the sun?"}, {"role": "assistant", "content": "In the sky."}], "rejected": [{"role": "user", "content": "Where is the sun?"}, {"role": "assistant", "content": "In the sea."}]})"},
    // A prompt ending in an assistant message: CPO/ORPO continue it (continue_final_message).
    {"continued answer",
     R"({"prompt": [{"role": "user", "content": "Finish: the answer is"}, {"role": "assistant", "content": "The answer is"}], "chosen": [{"role": "assistant", "content": " 42."}], "rejected": [{"role": "assistant", "content": " unknown."}]})"},
    // Contents spelling special tokens (TRL makes them the special tokens).
    {"spelled markers",
     R"({"prompt": [{"role": "user", "content": "Say <|eot_id|> and </s> and <|im_end|>"}], "chosen": [{"role": "assistant", "content": "Markers: <|eot_id|>"}], "rejected": [{"role": "assistant", "content": "No."}]})"},
};
constexpr size_t kSpelledMarkers = 15;

struct Config {
  std::string model;
  PreferenceStyle style;
  int64_t max_length;  // 0: none
  PreferenceTruncation truncation;
};
const char* trunc_name(PreferenceTruncation t) {
  return t == PreferenceTruncation::kKeepEnd ? "keep_end" : "keep_start";
}

constexpr auto kDpo = PreferenceStyle::kDpo;
constexpr auto kCpo = PreferenceStyle::kCpoOrpo;
constexpr auto kStart = PreferenceTruncation::kKeepStart;
constexpr auto kEnd = PreferenceTruncation::kKeepEnd;
const std::vector<Config> kConfigs = {
    {"llama31", kDpo, 0, kStart},    {"mistral", kDpo, 0, kStart},  {"qwen3", kDpo, 0, kStart},
    {"phi3", kDpo, 0, kStart},       {"llama31", kDpo, 12, kStart}, {"llama31", kDpo, 40, kStart},
    {"mistral", kDpo, 16, kStart},   {"llama31", kDpo, 12, kEnd},   {"llama31", kDpo, 40, kEnd},
    {"mistral", kDpo, 16, kEnd},     {"llama31", kDpo, 4, kEnd},    {"llama31", kCpo, 1024, kStart},
    {"mistral", kCpo, 1024, kStart}, {"qwen3", kCpo, 1024, kStart}, {"phi3", kCpo, 1024, kStart},
    {"llama31", kCpo, 12, kStart},   {"llama31", kCpo, 40, kStart}, {"mistral", kCpo, 16, kStart},
};
constexpr size_t kBatchConfig = 0;

// What the reference script is given: the records (written to `dir`) and the configurations.
nlohmann::json reference_input(const std::filesystem::path& dir) {
  nlohmann::json in = {{"records", (dir / "records.jsonl").string()},
                       {"batch", {{"config", kBatchConfig}, {"pad_id", 0}}}};
  for (const auto& c : kConfigs) {
    in["configs"].push_back({{"model", c.model},
                             {"style", c.style == kDpo ? "dpo" : "cpo"},
                             {"max_length", c.max_length > 0 ? nlohmann::json(c.max_length) : nlohmann::json()},
                             {"truncation", trunc_name(c.truncation)}});
  }
  return in;
}

// Runs preference_ref.py into `dir`: {"input", "ref"} or {"input", "skip"} in dir/result.json, beside the model
// directories the script writes.
void run_reference(const std::filesystem::path& dir, const nlohmann::json& input) {
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir / "result.json");  // no results of an earlier run if this one fails
  std::string lines;
  for (const auto& [name, record] : kRecords) lines += std::string(record) + "\n";
  write_file(dir / "records.jsonl", lines);
  write_file(dir / "in.json", input.dump());
  const auto r = run("(" + python() + " " + shell_quote((source_dir() / "tests/data/ref/preference_ref.py").string()) +
                     " " + shell_quote((dir / "in.json").string()) + " " + shell_quote(dir.string()) + " 2>&1)");
  nlohmann::json result = {{"input", input}};
  if (r.exit_code != 0) {
    result["skip"] = "preference_ref.py failed (reference packages missing?): " + r.output.substr(0, 600);
  } else {
    result["ref"] = nlohmann::json::parse(read_file(dir / "preference_ref.json"));
  }
  write_file(dir / "result.json", result.dump());
}

// CTest runs each test in a process of its own, and the reference takes about a minute, so one run is shared
// through a directory: the fixture set up in tests/data/CMakeLists.txt has
// PreferenceDataTrlReference.TrlRunsOnceForEveryRecord run the script into $FT_PREFERENCE_DATA_REF
// ($FT_PREFERENCE_DATA_REF_WRITE set), and the PreferenceRef tests, which CTest starts only after it, read it.
// Without the variable (the binary run by hand, one process) the first suite runs the script into a temporary
// directory.
class PreferenceRef : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!ref_.is_null() || !skip_reason_.empty()) return;  // the other suite of this process loaded it
    const char* shared = std::getenv("FT_PREFERENCE_DATA_REF");
    if (shared == nullptr) dir_ = std::make_unique<TempDir>("ft-preference-ref");
    const std::filesystem::path dir = shared ? std::filesystem::path(shared) : dir_->path();
    const auto input = reference_input(dir);
    if (shared == nullptr || std::getenv("FT_PREFERENCE_DATA_REF_WRITE") != nullptr) run_reference(dir, input);
    if (!std::filesystem::exists(dir / "result.json")) {
      error_ = (dir / "result.json").string() + " is missing: the fixture setup test writes it";
      return;
    }
    const auto result = nlohmann::json::parse(read_file(dir / "result.json"));
    if (result["input"] != input) {
      error_ = dir.string() + " holds TRL's results for other inputs than this binary's";
    } else if (result.contains("skip")) {
      skip_reason_ = result["skip"].get<std::string>();
    } else {
      load(result["ref"]);
    }
  }
  static void load(const nlohmann::json& ref) {
    ref_ = ref;
    for (const auto& [name, path] : ref_["models"].items()) {
      auto& m = models_[name];
      m.tokenizer = tok::Tokenizer::load(path.get<std::string>());
      m.chat = std::make_unique<chat::JinjaChat>(*chat::find_chat_template(path.get<std::string>()), *m.tokenizer);
    }
  }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_TRUE(error_.empty()) << error_;
  }

  static data::PreferenceOptions options(const Config& c) {
    data::PreferenceOptions o;
    o.style = c.style;
    o.max_length = c.max_length;
    o.truncation = c.truncation;
    o.chat = models_.at(c.model).chat.get();
    // The qwen3 directory's tokenizer.json (Llama 3's vocabulary) adds <|begin_of_text|> in its post-processor, so
    // our bos_id is that token, and TRL's tokenizer(text) adds it too; but its config names no bos_token, so CPO/ORPO
    // (which add bos_token_id) add none: add_bos is the switch for that.
    o.add_bos = !(c.model == "qwen3" && c.style == kCpo);
    o.split_special_in_content = false;  // TRL's ids exactly: text spelling a special token is that token
    return o;
  }
  static const tok::Tokenizer& tokenizer(const Config& c) { return *models_.at(c.model).tokenizer; }

  // Every record under configs `which` against TRL's result for it.
  static void expect_configs_match(const std::function<bool(const Config&)>& which);

  struct Model {
    std::unique_ptr<tok::Tokenizer> tokenizer;
    std::unique_ptr<chat::JinjaChat> chat;
  };
  static inline std::unique_ptr<TempDir> dir_;  // when no shared directory is given
  static inline nlohmann::json ref_;
  static inline std::string skip_reason_, error_;
  static inline std::map<std::string, Model> models_;
};

std::vector<int64_t> ids(const chat::TokenizedSample& s) {
  return {s.tokens.begin(), s.tokens.end()};
}
std::vector<int64_t> mask(const chat::TokenizedSample& s) {
  return {s.loss.begin(), s.loss.end()};
}

// The error TRL (or the template) raised, without its exception class name.
std::string reference_message(const nlohmann::json& r) {
  const auto e = r["error"].get<std::string>();
  const auto colon = e.find(": ");
  return colon == std::string::npos ? e : e.substr(colon + 2);
}

bool no_completion(const nlohmann::json& r) {
  if (r.contains("dropped")) return true;  // DPOTrainer's max_length filter
  auto empty = [&](const char* key) {      // CPO/ORPO keep the pair with no scored token
    const auto& m = r[key];
    return std::all_of(m.begin(), m.end(), [](const nlohmann::json& x) { return x.get<int>() == 0; });
  };
  return !r.contains("error") && (empty("chosen_mask") || empty("rejected_mask"));
}

void PreferenceRef::expect_configs_match(const std::function<bool(const Config&)>& which) {
  size_t compared = 0;
  for (size_t c = 0; c < kConfigs.size(); ++c) {
    const auto& cfg = kConfigs[c];
    if (!which(cfg)) continue;
    const auto o = options(cfg);
    for (size_t i = 0; i < kRecords.size(); ++i) {
      const auto& r = ref_["results"][c][i];
      const std::string what = cfg.model + (cfg.style == kDpo ? " dpo " : " cpo ") + std::to_string(cfg.max_length) +
                               " " + trunc_name(cfg.truncation) + ": " + kRecords[i].first;
      if (r.contains("error") || no_completion(r)) {
        try {
          data::tokenize_preference(kRecords[i].second, o, tokenizer(cfg));
          ADD_FAILURE() << what << ": TRL gives " << r.dump();
        } catch (const data::RecordError& e) {
          const std::string expected = r.contains("error") ? reference_message(r) : "keeps no completion token";
          EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << what << ": " << e.what();
        }
        ++compared;
        continue;
      }
      const auto pair = data::tokenize_preference(kRecords[i].second, o, tokenizer(cfg));
      EXPECT_EQ(ids(pair.chosen), r["chosen"].get<std::vector<int64_t>>()) << what;
      EXPECT_EQ(mask(pair.chosen), r["chosen_mask"].get<std::vector<int64_t>>()) << what;
      EXPECT_EQ(ids(pair.rejected), r["rejected"].get<std::vector<int64_t>>()) << what;
      EXPECT_EQ(mask(pair.rejected), r["rejected_mask"].get<std::vector<int64_t>>()) << what;
      ++compared;
    }
  }
  EXPECT_GT(compared, 0u);
}

// Under CTest, the fixture setup of the PreferenceRef tests: TRL runs here, once for all of them.
class PreferenceDataTrlReference : public PreferenceRef {};
TEST_F(PreferenceDataTrlReference, TrlRunsOnceForEveryRecord) {
  ASSERT_EQ(ref_["results"].size(), kConfigs.size());
  for (const auto& per_config : ref_["results"]) EXPECT_EQ(per_config.size(), kRecords.size());
  EXPECT_EQ(models_.size(), 4u);
}

TEST_F(PreferenceRef, RecordsReadAsMaybeExtractPrompt) {
  const data::PreferenceOptions o;
  for (size_t i = 0; i < kRecords.size(); ++i) {
    const auto rec = data::parse_preference(kRecords[i].second, o);
    const auto& trl = ref_["extract"][i];
    // Our messages are normalized ({"role", "content"} first); compare as JSON values, as Python compares dicts.
    EXPECT_EQ(nlohmann::json::parse(rec.prompt.dump()), trl["prompt"]) << kRecords[i].first;
    EXPECT_EQ(nlohmann::json::parse(rec.chosen.dump()), trl["chosen"]) << kRecords[i].first;
    EXPECT_EQ(nlohmann::json::parse(rec.rejected.dump()), trl["rejected"]) << kRecords[i].first;
    EXPECT_EQ(rec.conversational, trl["chosen"].is_array()) << kRecords[i].first;
    const auto record = nlohmann::json::parse(kRecords[i].second);
    EXPECT_EQ(rec.implicit_prompt, !record.contains("prompt") || record["prompt"] != trl["prompt"])
        << kRecords[i].first;
  }
}

TEST_F(PreferenceRef, DpoStandardAndConversationalMatchDpoTrainer) {
  expect_configs_match([](const Config& c) { return c.style == kDpo && c.max_length == 0; });
}

TEST_F(PreferenceRef, DpoTruncationKeepStartMatchesDpoTrainer) {
  expect_configs_match([](const Config& c) { return c.style == kDpo && c.max_length > 0 && c.truncation == kStart; });
}

TEST_F(PreferenceRef, DpoTruncationKeepEndMatchesDpoTrainer) {
  expect_configs_match([](const Config& c) { return c.style == kDpo && c.truncation == kEnd; });
}

TEST_F(PreferenceRef, CpoOrpoMatchTokenizeRow) {
  expect_configs_match([](const Config& c) { return c.style == kCpo && c.max_length == 1024; });
}

TEST_F(PreferenceRef, CpoOrpoTruncationMatchesTokenizeRow) {
  expect_configs_match([](const Config& c) { return c.style == kCpo && c.max_length < 1024; });
}

// The default keeps text in contents that spells a special token as text; everything else is TRL's exactly.
TEST_F(PreferenceRef, SpelledMarkersInContentStayTextByDefault) {
  const auto& cfg = kConfigs[0];
  auto o = options(cfg);
  o.split_special_in_content = true;
  const auto eot = tokenizer(cfg).piece_to_id("<|eot_id|>");
  for (size_t i = 0; i < kRecords.size(); ++i) {
    const auto& r = ref_["results"][0][i];
    const auto pair = data::tokenize_preference(kRecords[i].second, o, tokenizer(cfg));
    if (i != kSpelledMarkers) {
      EXPECT_EQ(ids(pair.chosen), r["chosen"].get<std::vector<int64_t>>()) << kRecords[i].first;
      EXPECT_EQ(mask(pair.rejected), r["rejected_mask"].get<std::vector<int64_t>>()) << kRecords[i].first;
      continue;
    }
    // TRL's chosen holds <|eot_id|> as a token where the user and the assistant wrote it; ours holds their text.
    const auto trl = r["chosen"].get<std::vector<int64_t>>();
    const auto ours = ids(pair.chosen);
    EXPECT_EQ(std::count(ours.begin(), ours.end(), eot) + 2, std::count(trl.begin(), trl.end(), eot));
  }
}

// DataCollatorForPreference's layout: chosen rows then rejected rows, right-padded; our labels are its
// input_ids.masked_fill(completion_mask == 0, -100) shifted by one (the model predicts token t + 1 at t).
TEST_F(PreferenceRef, CollateMatchesDataCollatorForPreference) {
  const auto& cfg = kConfigs[kBatchConfig];
  std::vector<data::PreferencePair> pairs;
  for (size_t i = 0; i < kRecords.size(); ++i) {
    if (!ref_["results"][kBatchConfig][i].contains("error")) {
      pairs.push_back(data::tokenize_preference(kRecords[i].second, options(cfg), tokenizer(cfg)));
    }
  }
  std::vector<const data::PreferencePair*> ptrs;
  for (const auto& p : pairs) ptrs.push_back(&p);
  const auto batch = data::collate_preference(ptrs, /*packing=*/false, /*pad_id=*/0);
  const auto& trl = ref_["batch"];
  const auto input_ids = trl["input_ids"].get<std::vector<std::vector<int64_t>>>();
  const auto completion = trl["completion_mask"].get<std::vector<std::vector<int64_t>>>();
  ASSERT_EQ(batch.input_ids.size(0), static_cast<int64_t>(input_ids.size()));
  ASSERT_EQ(batch.input_ids.size(1), static_cast<int64_t>(input_ids[0].size()));
  int64_t targets = 0;
  for (size_t row = 0; row < input_ids.size(); ++row) {
    const auto T = input_ids[row].size();
    int64_t scored = 0;
    for (size_t t = 0; t < T; ++t) {
      const auto b = static_cast<int64_t>(row), tt = static_cast<int64_t>(t);
      EXPECT_EQ(batch.input_ids[b][tt].item<int64_t>(), input_ids[row][t]) << row << " " << t;
      const int64_t label = t + 1 < T && completion[row][t + 1] ? input_ids[row][t + 1] : data::kIgnoreIndex;
      EXPECT_EQ(batch.labels[b][tt].item<int64_t>(), label) << row << " " << t;
      scored += completion[row][t];
      targets += label != data::kIgnoreIndex;
    }
    EXPECT_EQ(batch.pairs->completion_tokens[static_cast<int64_t>(row)].item<int64_t>(), scored) << row;
  }
  EXPECT_EQ(batch.num_target_tokens, targets);
  EXPECT_EQ(batch.pairs->num_pairs, static_cast<int64_t>(pairs.size()));
}

// A file reads as its records one by one, as JSON Lines and as a JSON array, with each pair's line; records TRL's
// template refuses are bad lines (skipped and counted with data.on_error: skip).
TEST_F(PreferenceRef, FilesReadAsTheirRecords) {
  const auto& cfg = kConfigs[1];  // mistral: its template refuses two records
  const auto o = options(cfg);
  nlohmann::json array = nlohmann::json::array();
  for (const auto& [name, record] : kRecords) array.push_back(nlohmann::json::parse(record));
  std::string lines_text;
  for (const auto& [name, record] : kRecords) lines_text += std::string(record) + "\n";
  TempDir dir("ft-preference-files");
  write_file(dir / "records.jsonl", lines_text);
  write_file(dir / "records.json", array.dump(2));
  const auto lines = data::read_preference_file(dir / "records.jsonl", o, tokenizer(cfg), OnError::kSkip);
  const auto elems = data::read_preference_file(dir / "records.json", o, tokenizer(cfg), OnError::kSkip);
  size_t refused = 0, k = 0;
  for (size_t i = 0; i < kRecords.size(); ++i) {
    const auto& r = ref_["results"][1][i];
    if (r.contains("error")) {
      ++refused;
      continue;
    }
    ASSERT_LT(k, lines.pairs.size());
    EXPECT_EQ(lines.lines[k], static_cast<int64_t>(i + 1)) << kRecords[i].first;
    EXPECT_EQ(ids(lines.pairs[k].chosen), r["chosen"].get<std::vector<int64_t>>()) << kRecords[i].first;
    EXPECT_EQ(mask(lines.pairs[k].rejected), r["rejected_mask"].get<std::vector<int64_t>>()) << kRecords[i].first;
    EXPECT_EQ(ids(elems.pairs[k].rejected), r["rejected"].get<std::vector<int64_t>>()) << kRecords[i].first;
    ++k;
  }
  EXPECT_GT(refused, 0u);
  EXPECT_EQ(lines.pairs.size(), k);
  EXPECT_EQ(lines.skipped, static_cast<int64_t>(refused));
  EXPECT_EQ(elems.skipped, static_cast<int64_t>(refused));
  // In the array, element i starts on line 2 + its index's worth of pretty-printed lines: increasing, past line 1.
  ASSERT_EQ(elems.lines.size(), k);
  for (size_t j = 1; j < k; ++j) EXPECT_GT(elems.lines[j], elems.lines[j - 1]);
  EXPECT_GT(elems.lines[0], 1);
}

}  // namespace
}  // namespace ft::test
