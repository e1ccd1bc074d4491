// The sentencepiece wrapper against Python sentencepiece on the same trained model.
#include <gtest/gtest.h>

#include "data/tokenizer_train.h"
#include "data_test_util.h"
#include "model/tokenizer_files.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

TEST(Tokenizer, IdsMatchPythonSentencepieceOnMixedScripts) {
  const auto tok = load_test_tokenizer();
  const std::vector<std::string> texts = {
      "Hello, world!", "日本語のテキスト 中文 한국어", "emoji 🙂🚀 mixed ✨ unseen 🦙", "runs   of\t\twhitespace \n\n end ",
      "Café naïve Ångström jalapeño", "Add: 472 + 95\nAnswer: 567", "<|im_start|>user\nhi<|im_end|>", "",
      "  leading spaces", "Ωμέγα ελληνικά и кириллица"};
  nlohmann::json input = {{"model", test_tokenizer_model().string()}, {"texts", texts}};
  const auto ref = run_python(R"(
import json, sys, sentencepiece as spm
a = json.load(open(sys.argv[1]))
sp = spm.SentencePieceProcessor(model_file=a["model"])
print(json.dumps({"ids": [sp.encode(t) for t in a["texts"]], "bos": sp.bos_id(), "eos": sp.eos_id(),
                  "pad": sp.pad_id(), "n": sp.get_piece_size(),
                  "decoded": [sp.decode(sp.encode(t)) for t in a["texts"]]}))
)",
                              input);
  ASSERT_EQ(ref["n"].get<int64_t>(), tok->vocab_size());
  EXPECT_EQ(ref["bos"].get<int64_t>(), tok->bos_id());
  EXPECT_EQ(ref["eos"].get<int64_t>(), tok->eos_id());
  EXPECT_EQ(ref["pad"].get<int64_t>(), tok->pad_id());
  EXPECT_NE(tok->pad_id(), tok->eos_id());
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto ids = tok->encode(texts[i]);
    EXPECT_EQ(ids, ref["ids"][i].get<std::vector<int64_t>>()) << texts[i];
    EXPECT_EQ(tok->decode(ids), ref["decoded"][i].get<std::string>()) << texts[i];
  }
}

TEST(Tokenizer, ChatMarkersAreSinglePiecesAndUnknownPiecesAreAbsent) {
  const auto tok = load_test_tokenizer();
  const int64_t eot = tok->piece_to_id("<|eot_id|>");
  ASSERT_GE(eot, 0);
  EXPECT_EQ(tok->encode("<|eot_id|>").back(), eot);
  EXPECT_EQ(tok->piece_to_id("<definitely-not-a-piece>"), -1);
  EXPECT_EQ(tok->piece_to_id("<unk>"), 0);
}

TEST(Tokenizer, ModelDirectoryConfigsOverrideSpecialIds) {
  TempDir dir("ft-tokcfg");
  write_file(dir / "config.json", R"({"bos_token_id": 1, "eos_token_id": [5, 2], "pad_token_id": null})");
  write_file(dir / "tokenizer_config.json", R"({"eos_token": {"content": "<|eot_id|>"}, "pad_token": "<unk>"})");
  const auto tok = tok::Tokenizer::load(test_tokenizer_model(), dir.path());
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), tok->piece_to_id("<|eot_id|>"));  // tokenizer_config.json wins over config.json
  EXPECT_EQ(tok->pad_id(), 0);
}

TEST(Tokenizer, MissingModelIsAClearError) {
  try {
    tok::Tokenizer::load("/nonexistent/tokenizer.model");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.model"), std::string::npos);
  }
}

TEST(Tokenizer, TrainingIsDeterministicAndReadsJsonLines) {
  TempDir dir("ft-toktrain");
  std::string jsonl;
  for (int i = 0; i < 50; ++i) {
    jsonl += nlohmann::json{{"prompt", "Add: " + std::to_string(i) + " + 7\nAnswer:"},
                            {"completion", " " + std::to_string(i + 7)}}.dump() + "\n";
  }
  write_file(dir / "d.jsonl", jsonl);
  data::train_tokenizer({dir / "d.jsonl"}, 300, "bpe", dir / "a");
  data::train_tokenizer({dir / "d.jsonl"}, 300, "bpe", dir / "b");
  // The .model embeds its output path, so compare the learned pieces and scores.
  EXPECT_EQ(read_file(dir / "a" / "tokenizer.vocab"), read_file(dir / "b" / "tokenizer.vocab"));
  const auto tok = tok::Tokenizer::load(dir / "a" / "tokenizer.model");
  EXPECT_GE(tok->piece_to_id("Answer"), 0);  // learned from the JSON strings, not the JSON syntax
  EXPECT_EQ(tok->piece_to_id("\"prompt\""), -1);
}

// A .json file holding one array of records trains the same tokenizer as the JSON Lines file of those records, as
// the datasets read both.
TEST(Tokenizer, TrainingReadsAJsonArrayFileLikeJsonLines) {
  TempDir dir("ft-toktrain-array");
  nlohmann::json array = nlohmann::json::array();
  std::string jsonl;
  for (int i = 0; i < 50; ++i) {
    const nlohmann::json record{{"text", "Reverse: " + std::to_string(i * 37) + " -> " + std::to_string(i * 73)}};
    array.push_back(record);
    jsonl += record.dump() + "\n";
  }
  write_file(dir / "d.jsonl", jsonl);
  write_file(dir / "d.json", array.dump(2));
  data::train_tokenizer({dir / "d.jsonl"}, 300, "bpe", dir / "lines");
  data::train_tokenizer({dir / "d.json"}, 300, "bpe", dir / "array");
  EXPECT_EQ(read_file(dir / "array" / "tokenizer.vocab"), read_file(dir / "lines" / "tokenizer.vocab"));
}

// Plain text trains the same tokenizer with CRLF line ends as with LF (no carriage-return piece); a line of invalid
// UTF-8 is refused with its file and line, as a record is.
TEST(Tokenizer, TrainingOnPlainTextTakesCrlfAndRefusesInvalidUtf8) {
  TempDir dir("ft-toktrain-txt");
  std::string lf, crlf;
  for (int i = 0; i < 60; ++i) {
    const std::string line = "Sort: " + std::to_string(i * 31) + " " + std::to_string(i * 7);
    lf += line + "\n";
    crlf += line + "\r\n";
  }
  write_file(dir / "lf.txt", lf);
  write_file(dir / "crlf.txt", crlf);
  data::train_tokenizer({dir / "lf.txt"}, 400, "bpe", dir / "lf");
  data::train_tokenizer({dir / "crlf.txt"}, 400, "bpe", dir / "crlf");
  EXPECT_EQ(read_file(dir / "crlf" / "tokenizer.vocab"), read_file(dir / "lf" / "tokenizer.vocab"));
  // Byte fallback's 256 pieces and the 4 special ids need 260 before any text piece: smaller is a config error.
  EXPECT_THROW(data::train_tokenizer({dir / "lf.txt"}, 100, "bpe", dir / "small"), ConfigError);
  write_file(dir / "bad.txt", "fine\nlatin1 caf\xe9\n");
  try {
    data::train_tokenizer({dir / "bad.txt"}, 400, "bpe", dir / "bad");
    ADD_FAILURE() << "no error for invalid UTF-8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.txt:2: invalid UTF-8"), std::string::npos) << e.what();
  }
}

TEST(TokenizerFiles, FilesThatLinkOutOfTheModelDirectoryAreNotCopied) {
  TempDir dir("ft-tokcopy");
  std::filesystem::create_directories(dir / "m");
  write_file(dir / "secret.txt", "not a tokenizer");
  write_file(dir / "m" / "tokenizer_config.json", "{}");
  std::filesystem::create_symlink(dir / "secret.txt", dir / "m" / "tokenizer.json");
  EXPECT_THROW(model::copy_tokenizer_files(dir / "m", dir / "out"), ConfigError);
  EXPECT_FALSE(std::filesystem::exists(dir / "out" / "tokenizer.json"));
  std::filesystem::remove(dir / "m" / "tokenizer.json");
  EXPECT_EQ(model::copy_tokenizer_files(dir / "m", dir / "out"), std::vector<std::string>{"tokenizer_config.json"});
}

}  // namespace
}  // namespace ft::test
