// Tokenized datasets: every format's tokens and loss mask, overlong policy, weights, cache hits and invalidation,
// concurrent builders, and every kind of bad input.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <thread>

#include "data/dataset.h"
#include "data/json_records.h"
#include "data_test_util.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

using data::DatasetOptions;
using data::TokenizedDataset;

struct Fixture {
  TempDir dir{"ft-ds"};
  std::unique_ptr<tok::Tokenizer> tok = load_test_tokenizer();
  DatasetOptions options(const std::string& file, const std::string& format, const std::string& text) {
    write_file(dir / file, text);
    DatasetOptions o;
    o.sources = {{(dir / file).string(), parse_setting<SourceFormat>(format).value(), 1.0}};
    o.cache_dir = dir / "cache";
    o.seq_len = 64;
    return o;
  }
};

std::vector<int64_t> ids(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

TEST(Dataset, PromptCompletionMasksThePromptAndTrainsEos) {
  Fixture f;
  const auto ds = TokenizedDataset::build(
      f.options("pc.jsonl", "prompt_completion", R"({"prompt": "Add: 472 + 95\nAnswer:", "completion": " 567"})" "\n"),
      *f.tok);
  ASSERT_EQ(ds->size(), 1);
  const auto ref = run_python(R"(
import json, sys, sentencepiece as spm
a = json.load(open(sys.argv[1]))
sp = spm.SentencePieceProcessor(model_file=a["model"])
p, c = sp.encode("Add: 472 + 95\nAnswer:"), sp.encode("567")  # the dummy prefix stands for the completion's space
print(json.dumps({"ids": [sp.bos_id()] + p + c + [sp.eos_id()], "loss": [0] * (1 + len(p)) + [1] * (len(c) + 1)}))
)",
                              {{"model", test_tokenizer_model().string()}});
  std::vector<int32_t> t;
  std::vector<uint8_t> l;
  ds->get(0, t, l);
  EXPECT_EQ(ids(t), ref["ids"].get<std::vector<int64_t>>());
  EXPECT_EQ(l, ref["loss"].get<std::vector<uint8_t>>());
  EXPECT_EQ(ds->stats().target_tokens, static_cast<int64_t>(std::count(l.begin(), l.end(), 1)));
}

TEST(Dataset, TextTrainsEveryTokenAfterBos) {
  Fixture f;
  const auto ds = TokenizedDataset::build(f.options("t.jsonl", "text", R"({"text": "hello there"})" "\n"), *f.tok);
  std::vector<int32_t> t;
  std::vector<uint8_t> l;
  ds->get(0, t, l);
  auto expect = f.tok->encode("hello there");
  expect.insert(expect.begin(), f.tok->bos_id());
  expect.push_back(f.tok->eos_id());
  EXPECT_EQ(ids(t), expect);
  std::vector<uint8_t> loss(expect.size(), 1);
  loss[0] = 0;
  EXPECT_EQ(l, loss);
}

TEST(Dataset, AlpacaRendersInstructionInputAndResponse) {
  Fixture f;
  auto o = f.options("a.jsonl", "alpaca", R"({"instruction": "Sort", "input": "3 1", "output": " 1 3"})" "\n"
                                          R"({"instruction": "Say hi", "output": " hi"})" "\n");
  o.fields.prompt = "instruction";
  o.fields.completion = "output";
  o.add_bos = false;
  o.add_eos = false;
  const auto ds = TokenizedDataset::build(o, *f.tok);
  ASSERT_EQ(ds->size(), 2);
  std::vector<int32_t> t;
  std::vector<uint8_t> l;
  ds->get(0, t, l);
  auto expect = f.tok->encode("### Instruction:\nSort\n\n### Input:\n3 1\n\n### Response:\n");
  const size_t prompt_len = expect.size();
  const auto c = f.tok->encode("1 3");  // the dummy prefix stands for the leading space
  expect.insert(expect.end(), c.begin(), c.end());
  EXPECT_EQ(ids(t), expect);
  for (size_t i = 0; i < l.size(); ++i) EXPECT_EQ(l[i], i >= prompt_len ? 1 : 0) << i;
  ds->get(1, t, l);
  EXPECT_EQ(f.tok->decode(ids(t)), "### Instruction:\nSay hi\n\n### Response:\n hi");
}

TEST(Dataset, ChatLossOnlyOnAssistantTurns) {
  Fixture f;
  auto o = f.options("c.jsonl", "chat",
                     R"({"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]})"
                     "\n");
  o.template_name = "chatml";
  const auto ds = TokenizedDataset::build(o, *f.tok);
  std::vector<int32_t> t;
  std::vector<uint8_t> l;
  ds->get(0, t, l);
  std::vector<int64_t> loss_ids;
  for (size_t i = 0; i < t.size(); ++i) {
    if (l[i]) loss_ids.push_back(t[i]);
  }
  auto expect = f.tok->encode("hi");
  expect.push_back(f.tok->piece_to_id("<|im_end|>"));
  EXPECT_EQ(loss_ids, expect);
}

TEST(Dataset, PretokenizedUint16IsSplitIntoRows) {
  Fixture f;
  std::vector<uint16_t> tokens = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
  write_file(f.dir / "p.bin", std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2));
  DatasetOptions o;
  o.sources = {{(f.dir / "p.bin").string(), SourceFormat::kPretokenized, 1.0}};
  o.seq_len = 4;
  const auto ds = TokenizedDataset::build(o, *f.tok);
  ASSERT_EQ(ds->size(), 2);
  std::vector<int32_t> t;
  std::vector<uint8_t> l;
  ds->get(1, t, l);
  EXPECT_EQ(t, (std::vector<int32_t>{9, 10, 11, 12}));
  EXPECT_EQ(l, (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(ds->stats().dropped, 1);  // the 2-token tail
}

TEST(Dataset, OverlongSamplesAreTruncatedOrDroppedAndCounted) {
  Fixture f;
  const std::string lines = R"({"text": "short"})" "\n" R"({"text": "a much longer text that cannot fit in eight tokens at all"})" "\n";
  auto o = f.options("o.jsonl", "text", lines);
  o.seq_len = 8;
  auto ds = TokenizedDataset::build(o, *f.tok);
  EXPECT_EQ(ds->size(), 2);
  EXPECT_EQ(ds->stats().truncated, 1);
  EXPECT_EQ(ds->length(1), 8);
  o.overlong = Overlong::kDrop;
  ds = TokenizedDataset::build(o, *f.tok);
  EXPECT_EQ(ds->size(), 1);
  EXPECT_EQ(ds->stats().dropped, 1);
}

// A sample cut to seq_len with no target token left (its prompt fills seq_len) is dropped, and counted once: as
// dropped, not also as truncated.
TEST(Dataset, SampleCutToNoTargetsCountsAsDroppedOnly) {
  Fixture f;
  const std::string lines = R"({"prompt": "a much longer prompt that cannot fit in eight tokens at all", )"
                            R"("completion": " done"})"
                            "\n"
                            R"({"prompt": "p", "completion": " c"})"
                            "\n";
  auto o = f.options("pc.jsonl", "prompt_completion", lines);
  o.seq_len = 8;
  const auto ds = TokenizedDataset::build(o, *f.tok);
  EXPECT_EQ(ds->size(), 1);
  EXPECT_EQ(ds->stats().dropped, 1);
  EXPECT_EQ(ds->stats().truncated, 0);
}

TEST(Dataset, WeightsRepeatAndSubsampleSources) {
  Fixture f;
  std::string lines;
  for (int i = 0; i < 10; ++i) lines += nlohmann::json{{"text", "sample " + std::to_string(i)}}.dump() + "\n";
  auto o = f.options("w.jsonl", "text", lines);
  o.sources.push_back(o.sources[0]);
  o.sources[0].weight = 2.0;
  o.sources[1].weight = 0.5;
  const auto ds = TokenizedDataset::build(o, *f.tok);
  EXPECT_EQ(ds->size(), 25);
  EXPECT_EQ(ds->stats().epoch_samples, 25);
}

// A weight so small that it rounds to no sample still keeps one a source (never dropped without a word); a weight
// that would make more than a billion samples an epoch is a configuration error naming the source.
TEST(Dataset, EverySourceWithAWeightGivesASampleAndHugeWeightsAreRefused) {
  Fixture f;
  auto o = f.options("few.jsonl", "text",
                     R"({"text": "a"})"
                     "\n"
                     R"({"text": "b"})"
                     "\n");
  o.sources[0].weight = 0.1;
  EXPECT_EQ(TokenizedDataset::build(o, *f.tok)->size(), 1);
  o.sources[0].weight = 1e12;
  try {
    TokenizedDataset::build(o, *f.tok);
    ADD_FAILURE() << "no error for weight 1e12";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("few.jsonl: weight 1e+12"), std::string::npos) << e.what();
  }
}

TEST(Dataset, SecondBuildHitsTheCacheAndAChangedFileInvalidatesIt) {
  Fixture f;
  auto o = f.options("c.jsonl", "text", R"({"text": "one"})" "\n");
  EXPECT_FALSE(TokenizedDataset::build(o, *f.tok)->stats().sources[0].from_cache);
  const auto again = TokenizedDataset::build(o, *f.tok);
  EXPECT_TRUE(again->stats().sources[0].from_cache);
  EXPECT_EQ(again->stats().tokens, TokenizedDataset::build(o, *f.tok)->stats().tokens);
  write_file(f.dir / "c.jsonl", R"({"text": "two words"})" "\n");
  const auto changed = TokenizedDataset::build(o, *f.tok);
  EXPECT_FALSE(changed->stats().sources[0].from_cache);
  std::vector<int32_t> t;
  std::vector<uint8_t> l;
  changed->get(0, t, l);
  EXPECT_EQ(f.tok->decode(ids(t)), "two words");
  o.seq_len = 32;  // a different seq_len is a different entry
  EXPECT_FALSE(TokenizedDataset::build(o, *f.tok)->stats().sources[0].from_cache);
}

TEST(Dataset, ConcurrentBuildersProduceOneCacheEntry) {
  Fixture f;
  std::string lines;
  for (int i = 0; i < 300; ++i) lines += nlohmann::json{{"text", "concurrent sample " + std::to_string(i)}}.dump() + "\n";
  const auto o = f.options("cc.jsonl", "text", lines);
  std::vector<std::shared_ptr<const TokenizedDataset>> built(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < built.size(); ++i) {
    threads.emplace_back([&, i] { built[i] = TokenizedDataset::build(o, *f.tok); });
  }
  for (auto& t : threads) t.join();
  int tokenized = 0;
  for (const auto& b : built) {
    tokenized += b->stats().sources[0].from_cache ? 0 : 1;
    EXPECT_EQ(b->stats().tokens, built[0]->stats().tokens);
  }
  EXPECT_EQ(tokenized, 1);
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(f.dir / "cache")) entries += e.is_directory() ? 1 : 0;
  EXPECT_EQ(entries, 1);
}

// A cache entry is trusted only after checks: token ids past the vocabulary (they would index past the embedding)
// and an unreadable meta.json are refused with the entry named and how to rebuild it.
TEST(Dataset, DamagedCacheEntriesAreRefusedAndNameTheEntry) {
  Fixture f;
  const auto o = f.options("d.jsonl", "text", R"({"text": "one two three"})" "\n");
  TokenizedDataset::build(o, *f.tok);
  std::filesystem::path entry;
  for (const auto& e : std::filesystem::directory_iterator(f.dir / "cache")) {
    if (e.is_directory()) entry = e.path();
  }
  ASSERT_FALSE(entry.empty());
  const std::string tokens = read_file(entry / "tokens.bin");
  std::string bad = tokens;
  const int32_t huge = 1 << 30;
  std::memcpy(bad.data() + 4, &huge, sizeof huge);
  write_file(entry / "tokens.bin", bad);
  expect_error_contains([&] { TokenizedDataset::build(o, *f.tok); },
                        {entry.string(), "outside the tokenizer's vocabulary", "delete"});
  write_file(entry / "tokens.bin", tokens);
  const std::string meta = read_file(entry / "meta.json");
  write_file(entry / "meta.json", "{\"path\": 1");
  expect_error_contains([&] { TokenizedDataset::build(o, *f.tok); }, {entry.string(), "meta.json"});
  // Found when writing tests/fuzz/fuzz_dataset: a sample count whose (samples + 1) * 8 wraps around matched the size
  // of an empty offsets.bin, and the first offset was read from an empty mapping.
  auto overflowing = nlohmann::json::parse(meta);
  overflowing["samples"] = std::numeric_limits<int64_t>::max();
  write_file(entry / "meta.json", overflowing.dump());
  for (const char* name : {"tokens.bin", "loss.bin", "offsets.bin"}) write_file(entry / name, "");
  expect_error_contains([&] { TokenizedDataset::build(o, *f.tok); }, {entry.string(), "sizes of tokens.bin"});
  // Found by CI's fuzzing: a count written as a float outside int64's range was converted with a plain cast
  // (undefined behaviour). Counts must be JSON integers.
  auto fractional = nlohmann::json::parse(meta);
  fractional["tokens"] = 1e300;
  write_file(entry / "meta.json", fractional.dump());
  expect_error_contains([&] { TokenizedDataset::build(o, *f.tok); }, {entry.string(), "meta.json", "1e+300"});
}

// Each bad input: the error names file:line and the field; skip mode counts it and keeps the good lines.
// data.cache_dir empty: the per-user cache of the XDG convention, never a folder beside the run directory.
TEST(Dataset, DefaultCacheIsThePerUserXdgCache) {
  struct EnvRestore {
    std::string name;
    std::optional<std::string> value;
    explicit EnvRestore(std::string n) : name(std::move(n)) {
      if (const char* v = std::getenv(name.c_str())) value = v;
    }
    ~EnvRestore() { value ? ::setenv(name.c_str(), value->c_str(), 1) : ::unsetenv(name.c_str()); }
  } xdg("XDG_CACHE_HOME"), home("HOME");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(data::default_cache_dir("runs/x"), std::filesystem::path("/xdg/finetune/data"));
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(data::default_cache_dir("runs/x"), std::filesystem::path("/home/u/.cache/finetune/data"));
  ::setenv("XDG_CACHE_HOME", "relative", 1);  // not absolute: ignored, as the XDG spec says
  EXPECT_EQ(data::default_cache_dir("runs/x"), std::filesystem::path("/home/u/.cache/finetune/data"));
  ::unsetenv("HOME");
  EXPECT_EQ(data::default_cache_dir("runs/x"), std::filesystem::path("runs/x/.cache/data"));
  Config cfg;
  cfg.run.output_dir = "runs/x";
  EXPECT_EQ(data::DatasetOptions::from_config(cfg, false).cache_dir, std::filesystem::path("runs/x/.cache/data"));
}

TEST(Dataset, BadInputsNameFileLineAndField) {
  struct Case {
    std::string format, bad_line, field;
  };
  const std::vector<Case> cases = {
      {"text", "{not json", "invalid JSON"},
      {"prompt_completion", R"({"prompt": "p"})", "completion"},
      {"prompt_completion", R"({"prompt": 3, "completion": "c"})", "prompt"},
      {"chat", R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role"},
      {"chat", R"({"messages": "nope"})", "messages"},
      // a ShareGPT tool result under a built-in template: named as the record says it
      {"chat", R"({"conversations": [{"from": "human", "value": "q"}, {"from": "observation", "value": "x"}]})",
       "speaker 'observation' in 'conversations[1].from' is a tool turn"},
      {"text", "{\"text\": \"bad \xff\xfe utf8\"}", "invalid UTF-8"},
      // refused while parsing: copying or walking a deeper value could exhaust the stack
      {"chat",
       R"({"messages": [{"role": "user", "content": "q", "x": )" + std::string(100000, '[') + std::string(100000, ']') +
           "}]}",
       "nested more than 256 levels"},
  };
  for (const auto& c : cases) {
    Fixture f;
    const std::string good = c.format == "chat"
                                 ? R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})"
                                 : c.format == "text" ? R"({"text": "ok"})" : R"({"prompt": "p", "completion": "c"})";
    auto o = f.options("bad.jsonl", c.format, good + "\n\n" + c.bad_line + "\n" + good + "\n");
    const std::string where = (f.dir / "bad.jsonl").string() + ":3";
    try {
      TokenizedDataset::build(o, *f.tok);
      ADD_FAILURE() << "no error for " << c.bad_line;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.field), std::string::npos) << e.what();
    }
    o.on_error = OnError::kSkip;
    const auto ds = TokenizedDataset::build(o, *f.tok);
    EXPECT_EQ(ds->size(), 2) << c.bad_line;
    EXPECT_EQ(ds->stats().skipped, 1);
    EXPECT_EQ(ds->stats().sources[0].skipped_lines, std::vector<int64_t>{3});
  }
}

// A .json file holding one array of records gives the same samples as the JSON Lines file of those records; its
// errors name the line the bad element starts on, and a broken array names where it breaks.
TEST(Dataset, JsonArrayFilesAreReadLikeJsonLines) {
  Fixture f;
  const std::string a = R"({"prompt": "p1", "completion": "c1"})";
  const std::string b = R"({"prompt": "two, [three]", "completion": "c\"2\""})";
  auto lines = f.options("d.jsonl", "prompt_completion", a + "\n" + b + "\n");
  auto array = f.options("d.json", "prompt_completion", "[\n  " + a + ",\n  " + b + "\n]\n");
  const auto from_lines = TokenizedDataset::build(lines, *f.tok);
  const auto from_array = TokenizedDataset::build(array, *f.tok);
  ASSERT_EQ(from_array->size(), 2);
  for (int64_t i = 0; i < 2; ++i) {
    std::vector<int32_t> t1, t2;
    std::vector<uint8_t> l1, l2;
    from_lines->get(i, t1, l1);
    from_array->get(i, t2, l2);
    EXPECT_EQ(t1, t2);
    EXPECT_EQ(l1, l2);
  }
  auto bad = f.options("bad.json", "prompt_completion", "[\n" + a + ",\n\n  {\"prompt\": 3,\n \"completion\": \"c\"}\n]");
  try {
    TokenizedDataset::build(bad, *f.tok);
    ADD_FAILURE() << "no error for a bad element";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find((f.dir / "bad.json").string() + ":4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("prompt"), std::string::npos) << e.what();
  }
  auto with_bom = f.options("bom.json", "prompt_completion", "\xEF\xBB\xBF[\n  " + a + ",\n  " + b + "\n]\n");
  EXPECT_EQ(TokenizedDataset::build(with_bom, *f.tok)->size(), 2);  // a byte order mark before the array
  for (const std::string& broken : {"[" + a + ", " + b, "[" + a + ",]", "[" + a + "] x"}) {
    auto o = f.options("broken.json", "prompt_completion", broken);
    try {
      TokenizedDataset::build(o, *f.tok);
      ADD_FAILURE() << "no error for " << broken;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("broken.json:1"), std::string::npos) << e.what();
    }
  }
}

// Alpaca files as they are published (instruction/input/output) read without renaming data.fields.
TEST(Dataset, AlpacaReadsInstructionAndOutputFields) {
  Fixture f;
  auto published = f.options("a.jsonl", "alpaca", R"({"instruction": "Sum", "input": "2 3", "output": "5"})" "\n");
  auto renamed = f.options("b.jsonl", "alpaca", R"({"prompt": "Sum", "input": "2 3", "completion": "5"})" "\n");
  std::vector<int32_t> t1, t2;
  std::vector<uint8_t> l1, l2;
  TokenizedDataset::build(published, *f.tok)->get(0, t1, l1);
  TokenizedDataset::build(renamed, *f.tok)->get(0, t2, l2);
  EXPECT_EQ(t1, t2);
  EXPECT_EQ(l1, l2);
}

TEST(Dataset, EmptyAndMissingFilesAreErrors) {
  Fixture f;
  auto o = f.options("empty.jsonl", "text", "\n  \n");
  try {
    TokenizedDataset::build(o, *f.tok);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("empty.jsonl:1: the file is empty"), std::string::npos) << e.what();
  }
  o.sources[0].path = (f.dir / "missing.jsonl").string();
  try {
    TokenizedDataset::build(o, *f.tok);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.jsonl"), std::string::npos) << e.what();
  }
}

// Lines are read in pieces, so a line of any length costs at most the record limit: longer ones are refused with
// file:line, and so is a JSON array file over its limit (it is read whole).
TEST(Dataset, RecordLinesOfAnyLengthAreReadAndAnOverlongOneIsRefused) {
  TempDir dir("ft-records");
  const std::string long_text(200000, 'x');  // three read buffers
  write_file(dir / "a.jsonl", "{\"text\": \"a\"}\n{\"text\": \"" + long_text + "\"}\r\n\n{\"text\": \"b\"}");
  data::RecordReader reader(dir / "a.jsonl");
  std::string rec;
  int64_t line = 0;
  ASSERT_TRUE(reader.next(rec, line));
  EXPECT_EQ(line, 1);
  EXPECT_EQ(rec, "{\"text\": \"a\"}");
  ASSERT_TRUE(reader.next(rec, line));
  EXPECT_EQ(line, 2);
  EXPECT_EQ(rec, "{\"text\": \"" + long_text + "\"}");
  ASSERT_TRUE(reader.next(rec, line));
  EXPECT_EQ(line, 4);
  EXPECT_EQ(rec, "{\"text\": \"b\"}");
  EXPECT_FALSE(reader.next(rec, line));

  data::RecordReader capped(dir / "a.jsonl", /*max_record_bytes=*/1024);
  ASSERT_TRUE(capped.next(rec, line));
  try {
    capped.next(rec, line);
    ADD_FAILURE() << "no error for a line over the limit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a.jsonl:2: a line longer than 1024 bytes"), std::string::npos) << e.what();
  }
  write_file(dir / "b.json", "[{\"text\": \"a\"}]");
  EXPECT_THROW(data::RecordReader(dir / "b.json", 1024, /*max_array_bytes=*/4), Error);
}

}  // namespace
}  // namespace ft::test
