// Unit tests without Python: malformed and unsupported files, invalid UTF-8, threading, small hand-made models.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "tokenizer/text_tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"
#include "util/error.h"

namespace ft::tok {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<int32_t>;

json minimal_json() {
  return json::parse(R"({
    "version": "1.0",
    "truncation": null,
    "padding": null,
    "added_tokens": [{"id": 5, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [5], "tokens": ["<s>"]}}},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "\u0120ab": 4},
              "merges": ["a b", ["\u0120", "ab"]]}
  })");
}

fs::path write_json(const json& j, const std::string& tag) {
  fs::path p = test::temp_dir(tag) / "tokenizer.json";
  test::write_file(p, j.dump());
  return p;
}

// Loading `file` throws ConfigError whose message names the file and contains every fragment, with a hint.
void expect_config_error(const std::function<void()>& load, const fs::path& file,
                         const std::vector<std::string>& fragments) {
  try {
    load();
    FAIL() << "expected ConfigError";
  } catch (const ft::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "missing \"" << f << "\" in: " << msg;
    EXPECT_FALSE(e.hint().empty()) << msg;
  }
}

void expect_json_error(const std::function<void(json&)>& mutate, const std::vector<std::string>& fragments) {
  json j = minimal_json();
  mutate(j);
  const fs::path p = write_json(j, "bad");
  expect_config_error([&] { load_tokenizer_json(p); }, p, fragments);
  expect_config_error([&] { load_text_tokenizer(p); }, p, fragments);
}

TEST(TokenizerJsonUnit, MinimalByteLevelBpeEncodesDecodesAndWrapsWithTemplate) {
  auto tok = load_tokenizer_json(write_json(minimal_json(), "min"));
  EXPECT_EQ(tok->encode("ab ab"), (Ids{2, 4}));
  EXPECT_EQ(tok->encode("<s>ab"), (Ids{5, 2}));
  EXPECT_EQ(tok->encode("<s>ab", EncodeOptions{true}), Ids{2});  // "<", "s", ">" are not in the vocab: dropped
  EXPECT_EQ(tok->decode({5, 2, 4}), "<s>ab ab");
  EXPECT_EQ(tok->decode({5, 2, 4, 99}, true), "ab ab");
  EXPECT_EQ(tok->prefix_tokens(), Ids{5});
  EXPECT_TRUE(tok->suffix_tokens().empty());
  EXPECT_EQ(tok->vocab_size(), 6);
  EXPECT_EQ(tok->token_to_id("\xC4\xA0"
                             "ab"),
            4);
  EXPECT_EQ(tok->id_to_token(5), "<s>");
  EXPECT_FALSE(tok->id_to_token(6).has_value());
  EXPECT_TRUE(tok->is_special(5));
  EXPECT_FALSE(tok->is_special(2));
  EXPECT_EQ(tok->add_tokens({"<new>", "ab", "<s>"}, false), (Ids{6, 2, 5}));
  EXPECT_EQ(tok->encode("x<new>ab"), (Ids{6, 2}));
  EXPECT_EQ(tok->vocab_size(), 7);
}

TEST(TokenizerJsonUnit, InvalidUtf8InTextThrowsErrorWithByteOffset) {
  auto tok = load_tokenizer_json(write_json(minimal_json(), "utf8"));
  try {
    tok->encode(std::string("ab\xC3(ab", 6));
    FAIL() << "expected ft::Error";
  } catch (const ft::ConfigError&) {
    FAIL() << "bad data is not a configuration error";
  } catch (const ft::Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte offset 2"), std::string::npos) << e.what();
    EXPECT_FALSE(e.hint().empty());
  }
  EXPECT_THROW(tok->encode(std::string("\xED\xA0\x80", 3)), ft::Error);  // UTF-8-encoded surrogate
  EXPECT_THROW(tok->encode(std::string("\xC0\xAF", 2)), ft::Error);      // overlong
}

TEST(TokenizerJsonUnit, EncodeBatchKeepsOrderAndPropagatesErrors) {
  auto tok = load_tokenizer_json(write_json(minimal_json(), "batch"));
  std::vector<std::string> texts;
  for (int i = 0; i < 500; ++i) texts.push_back(std::string(static_cast<size_t>(i % 7), 'a') + " ab");
  const auto out = tok->encode_batch(texts, 2);
  ASSERT_EQ(out.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(out[i], tok->encode(texts[i]));
  EXPECT_EQ(tok->encode_batch(texts, 0).size(), texts.size());
  EXPECT_TRUE(tok->encode_batch({}, 2).empty());
  texts[321] = "bad \xFF";
  EXPECT_THROW(tok->encode_batch(texts, 2), ft::Error);
}

TEST(TokenizerJsonUnit, TruncatedJsonNamesFile) {
  const std::string text = minimal_json().dump();
  const fs::path p = test::temp_dir("trunc") / "tokenizer.json";
  test::write_file(p, text.substr(0, text.size() / 2));
  expect_config_error([&] { load_tokenizer_json(p); }, p, {"not valid JSON"});
  expect_config_error([&] { load_text_tokenizer(p); }, p, {"not valid JSON"});
}

TEST(TokenizerJsonUnit, WrongTypesNameTheJsonPath) {
  expect_json_error([](json& j) { j["model"]["vocab"] = json::array({"a"}); }, {"model.vocab", "expected an object"});
  expect_json_error([](json& j) { j["model"]["vocab"]["a"] = "zero"; }, {"model.vocab.a", "non-negative integer"});
  expect_json_error([](json& j) { j["added_tokens"][0]["special"] = "yes"; },
                    {"added_tokens[0].special", "expected true or false"});
  expect_json_error([](json& j) { j["model"]["merges"] = 7; }, {"model.merges", "expected an array"});
  expect_json_error([](json& j) { j["pre_tokenizer"]["add_prefix_space"] = 1; },
                    {"pre_tokenizer.add_prefix_space", "expected true or false"});
}

TEST(TokenizerJsonUnit, MissingMergesIsAnError) {
  expect_json_error([](json& j) { j["model"].erase("merges"); }, {"model.merges", "missing required field"});
}

TEST(TokenizerJsonUnit, MergeNamingUnknownTokenIsAnError) {
  expect_json_error([](json& j) { j["model"]["merges"][1] = "\xC4\xA0 zz"; },
                    {"model.merges[1]", "\"zz\"", "not in model.vocab"});
  expect_json_error([](json& j) { j["model"]["merges"][0] = "ab"; }, {"model.merges[0]", "two tokens"});
  expect_json_error([](json& j) { j["model"]["merges"][0] = json::array({"a"}); }, {"model.merges[0]"});
}

TEST(TokenizerJsonUnit, UnknownComponentTypesAreNamedWithTheirPath) {
  expect_json_error(
      [](json& j) {
        j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", ""}};
      },
      {"normalizer", "unsupported normalizer type \"Precompiled\""});
  expect_json_error(
      [](json& j) {
        j["pre_tokenizer"] = {{"type", "Sequence"},
                              {"pretokenizers", json::array({j["pre_tokenizer"], {{"type", "BertPreTokenizer"}}})}};
      },
      {"pre_tokenizer.pretokenizers[1]", "unsupported pre_tokenizer type \"BertPreTokenizer\""});
  expect_json_error(
      [](json& j) {
        j["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}};
      },
      {"decoder", "\"WordPiece\""});
  expect_json_error([](json& j) { j["post_processor"] = {{"type", "Fancy"}}; }, {"post_processor", "\"Fancy\""});
  expect_json_error([](json& j) { j["model"]["type"] = "Unigram"; }, {"model", "unsupported model type \"Unigram\""});
  expect_json_error([](json& j) { j["normalizer"] = {{"nothing", 1}}; }, {"normalizer.type", "missing"});
}

TEST(TokenizerJsonUnit, DuplicateIdsAreErrors) {
  expect_json_error([](json& j) { j["model"]["vocab"]["c"] = 1; }, {"model.vocab", "duplicate id 1"});
  expect_json_error([](json& j) { j["added_tokens"][0]["id"] = 2; }, {"added_tokens[0].id", "duplicate id 2"});
  expect_json_error(
      [](json& j) {
        j["added_tokens"].push_back(j["added_tokens"][0]);
        j["added_tokens"][1]["content"] = "</s>";
      },
      {"added_tokens[1].id", "duplicate id 5"});
}

// Bounded memory for hostile files: an id far past the vocabulary's size (it would size a table of ~2^31 entries)
// and a file far larger than any real tokenizer are refused before anything large is allocated.
TEST(TokenizerJsonUnit, SparseHugeIdsAndOversizedFilesAreRefused) {
  expect_json_error([](json& j) { j["model"]["vocab"]["c"] = 2147483000; },
                    {"model.vocab", "the largest id 2147483000 is far beyond the 6 entries"});
  const fs::path big = test::temp_dir("big") / "tokenizer.json";
  {
    std::ofstream out(big, std::ios::binary);
    out.seekp((257ll << 20) - 1);
    out.put(' ');  // a sparse file: 257 MiB long, nothing written before the last byte
  }
  expect_config_error([&] { load_text_tokenizer(big); }, big, {"bytes, more than the 256 MiB"});
}

TEST(TokenizerJsonUnit, DropoutAndBadRegexAreRejected) {
  expect_json_error([](json& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout", "only null or 0"});
  expect_json_error(
      [](json& j) {
        j["pre_tokenizer"] = {
            {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}, {"invert", false}};
      },
      {"pre_tokenizer.pattern.Regex", "(unclosed"});
  expect_json_error(
      [](json& j) {
        j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
      },
      {"pre_tokenizer.behavior", "Sideways"});
  expect_json_error([](json& j) { j["post_processor"]["special_tokens"].erase("<s>"); },
                    {"post_processor.special_tokens", "\"<s>\""});
}

std::string tiktoken_file_text(const std::vector<std::string>& extra) {
  std::string text;
  for (int b = 0; b < 256; ++b) {
    text += unicode::base64_encode(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  }
  int rank = 256;
  for (const auto& t : extra) text += unicode::base64_encode(t) + " " + std::to_string(rank++) + "\n";
  return text;
}

TEST(TiktokenUnit, RanksMergeLowestFirstAndSpecialsMatch) {
  const fs::path p = test::temp_dir("tt") / "tokenizer.model";
  test::write_file(p, tiktoken_file_text({"ab", "bc", "abc", " a"}));
  TiktokenSpec spec;
  spec.pattern = R"( ?\p{L}+|\s+|.)";
  spec.specials = {{"<|x|>", 260}};
  spec.prefix = {260};
  auto tok = load_tiktoken(p, spec);
  EXPECT_EQ(tok->encode("abc"), Ids{258});
  EXPECT_EQ(tok->encode("abcb"), (Ids{258, 'b'}));
  EXPECT_EQ(tok->encode("bcab"), (Ids{257, 256}));
  EXPECT_EQ(tok->encode(" abc<|x|>"), (Ids{' ', 258, 260}));  // ab (256) first, then abc; " ab" is no token
  EXPECT_EQ(tok->encode("<|x|>", EncodeOptions{true}).size(), 5u);
  EXPECT_EQ(tok->decode({259, 257, 260}), " abc<|x|>");
  EXPECT_EQ(tok->decode({259, 257, 260}, true), " abc");
  EXPECT_EQ(tok->encode(" ab"), (Ids{' ', 256}));
  EXPECT_EQ(tok->decode({0xE4, 'a'}),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(tok->vocab_size(), 261);
  EXPECT_EQ(tok->id_to_token(259),
            "\xC4\xA0"
            "a");
  auto added = tok->add_tokens({"<new>"}, false);
  EXPECT_EQ(added, Ids{261});
  EXPECT_EQ(tok->encode("<new>a"), (Ids{261, 'a'}));
  EXPECT_THROW(tok->save(test::temp_dir("tt_save")), ft::ConfigError);
}

TEST(TiktokenUnit, MalformedLinesNameFileAndLine) {
  const fs::path dir = test::temp_dir("ttbad");
  TiktokenSpec spec = llama3_tiktoken_spec(300);
  std::string good = tiktoken_file_text({"ab"});
  auto lines_replaced = [&](size_t line, const std::string& with) {
    std::string out;
    size_t pos = 0, n = 0;
    while (pos < good.size()) {
      const size_t end = good.find('\n', pos);
      out += (++n == line ? with : good.substr(pos, end - pos)) + "\n";
      pos = end + 1;
    }
    return out;
  };
  const fs::path p = dir / "tokenizer.model";
  test::write_file(p, lines_replaced(3, "@@@ 2"));
  expect_config_error([&] { load_tiktoken(p, spec); }, p, {"line 3", "invalid base64"});
  test::write_file(p, lines_replaced(4, "Aw== x3"));
  expect_config_error([&] { load_tiktoken(p, spec); }, p, {"line 4", "invalid rank"});
  test::write_file(p, lines_replaced(5, "Aw== 3"));
  expect_config_error([&] { load_tiktoken(p, spec); }, p, {"line 5", "duplicate"});
  test::write_file(p, lines_replaced(6, "QUJD"));
  expect_config_error([&] { load_tiktoken(p, spec); }, p, {"line 6"});
  test::write_file(p, lines_replaced(7, "YWJjZA== 6"));
  expect_config_error([&] { load_tiktoken(p, spec); }, p, {"single byte 6"});
  // Found when writing tests/fuzz/fuzz_tokenizer: one line's rank sized the table (999999999 ranks: ~32 GB).
  test::write_file(p, good + "YWJjZGVm 999999999\n");
  expect_config_error([&] { load_tiktoken(p, spec); }, p, {"rank 999999999 is far beyond the file's token count"});
}

// Found when writing tests/fuzz/fuzz_tokenizer: nlohmann's out_of_range for a number beyond a double escaped the parse.
TEST(TokenizerJsonUnit, NumbersBeyondADoubleAreInvalidJson) {
  const fs::path p = test::temp_dir("huge-number") / "tokenizer.json";
  test::write_file(p, R"({"model": 1e999})");
  expect_config_error([&] { load_tokenizer_json(p); }, p, {"not valid JSON"});
  expect_config_error([&] { load_text_tokenizer(p); }, p, {"not valid JSON"});
}

TEST(LoadTextTokenizerUnit, UnrecognisedFilesAreConfigErrors) {
  const fs::path dir = test::temp_dir("detect");
  const fs::path bin = dir / "tokenizer.model";
  test::write_file(bin, std::string("\x0a\x0b\x0a\x05<unk>\x15\x00\x00\x00\x00\x18\x02", 14));  // sentencepiece-like
  expect_config_error([&] { load_text_tokenizer(bin); }, bin, {"not a tokenizer.json, tekken.json or tiktoken"});
  const fs::path other = dir / "config.json";
  test::write_file(other, R"({"architectures": ["LlamaForCausalLM"]})");
  expect_config_error([&] { load_text_tokenizer(other); }, other, {"neither a tokenizer.json"});
  const fs::path missing = dir / "missing.json";
  expect_config_error([&] { load_text_tokenizer(missing); }, missing, {"cannot open"});
}

TEST(TekkenUnit, MalformedTekkenNamesJsonPath) {
  auto tekken = [](int vocab) {
    json v = json::array();
    for (int i = 0; i < vocab; ++i) {
      v.push_back({{"rank", i},
                   {"token_bytes", unicode::base64_encode(std::string(1, static_cast<char>(i)))},
                   {"token_str", nullptr}});
    }
    return json{{"config",
                 {{"pattern", R"(\p{L}+|\s+|.)"},
                  {"num_vocab_tokens", vocab},
                  {"default_vocab_size", vocab + 30},
                  {"default_num_special_tokens", 30},
                  {"version", "v3"}}},
                {"vocab", v}};
  };
  const fs::path dir = test::temp_dir("tekken");
  const fs::path p = dir / "tekken.json";
  test::write_file(p, tekken(256).dump());
  auto tok = load_text_tokenizer(p);
  EXPECT_EQ(tok->kind(), "tekken");
  EXPECT_EQ(tok->encode("ab"), (Ids{30 + 'a', 30 + 'b'}));
  EXPECT_EQ(tok->decode({1, 30 + 'a', 2}), "<s>a</s>");
  EXPECT_EQ(tok->decode({1, 30 + 'a', 2}, true), "a");
  EXPECT_EQ(tok->id_to_token(29), "<SPECIAL_29>");
  EXPECT_EQ(tok->id_to_token(19), "[TOOL_CONTENT]");
  json bad = tekken(256);
  bad["vocab"][3]["rank"] = 4;
  test::write_file(p, bad.dump());
  expect_config_error([&] { load_tekken(p); }, p, {"vocab[3].rank", "expected rank 3"});
  bad = tekken(256);
  bad["config"].erase("pattern");
  test::write_file(p, bad.dump());
  expect_config_error([&] { load_text_tokenizer(p); }, p, {"config.pattern", "missing"});
  bad = tekken(256);
  bad["config"]["default_vocab_size"] = 400;
  test::write_file(p, bad.dump());
  expect_config_error([&] { load_tekken(p); }, p, {"vocab", "needs 370"});
  // Found when writing tests/fuzz/fuzz_tokenizer: a trillion special tokens made that many "<SPECIAL_i>" names.
  bad = tekken(256);
  bad["config"]["default_num_special_tokens"] = 1000000000000;
  bad["config"]["default_vocab_size"] = 1000000000256;
  test::write_file(p, bad.dump());
  expect_config_error([&] { load_tekken(p); }, p, {"default_num_special_tokens", "at most"});
}

TEST(UnicodeUnit, LossyDecodingReplacesMaximalSubparts) {
  EXPECT_EQ(unicode::utf8_lossy("a\xE4\xBD"
                                "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(unicode::utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");
  EXPECT_EQ(unicode::utf8_lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(unicode::utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(unicode::base64_decode("QUJD"), std::optional<std::string>("ABC"));
  EXPECT_EQ(unicode::base64_encode("AB"), "QUI=");
  EXPECT_FALSE(unicode::base64_decode("Q$JD").has_value());
}

}  // namespace
}  // namespace ft::tok
