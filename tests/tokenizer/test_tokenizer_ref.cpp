// Differential tests: ft_tokenizer against the reference Python packages on a stress corpus (suites TokenizerJson,
// Tiktoken, Tekken, SaveReload; label `integration`).
#include <gtest/gtest.h>

#include <fstream>

#include "tokenizer/text_tokenizer.h"
#include "tokenizer_test_util.h"
#include "util/error.h"

namespace ft::tok {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<int32_t>;

Ids ids_of(const json& j) {
  return j.get<Ids>();
}

std::string show(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 80)) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

using Offsets = std::vector<std::pair<size_t, size_t>>;

Offsets offsets_of(const json& j) {
  Offsets out;
  for (const auto& o : j) out.emplace_back(o.at(0).get<size_t>(), o.at(1).get<size_t>());
  return out;
}

// Offsets without a reference (tiktoken, tekken): within bounds, monotonic, and the covered text, each character
// taken once, is the decoded text whenever decoding gives the input back.
void expect_offsets_consistent(const TextTokenizer& tok, const std::string& text, const Encoding& enc) {
  ASSERT_EQ(enc.offsets.size(), enc.ids.size());
  std::string covered;
  size_t prev_begin = 0, prev_end = 0;
  for (size_t i = 0; i < enc.offsets.size(); ++i) {
    const auto [b, e] = enc.offsets[i];
    ASSERT_LE(b, e) << "token " << i;
    ASSERT_LE(e, text.size()) << "token " << i;
    ASSERT_GE(b, prev_begin) << "token " << i;
    if (e > prev_end) covered += text.substr(std::max(b, prev_end), e - std::max(b, prev_end));
    prev_begin = b;
    prev_end = std::max(prev_end, e);
  }
  const std::string decoded = tok.decode(enc.ids, false);
  if (decoded == text) {
    EXPECT_EQ(covered, text);
  }
}

// Everything refs.json records for one tokenizer: encode (with and without split_special), decode (with and
// without skip_special_tokens), decode of shuffled / random ids, prefix and suffix tokens, vocab size.
void expect_matches_reference(const TextTokenizer& tok, const json& ref) {
  const auto& texts = ref.at("texts");
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].get<std::string>();
    SCOPED_TRACE("text #" + std::to_string(i) + ": \"" + show(text) + "\"");
    const Ids ids = tok.encode(text);
    ASSERT_EQ(ids, ids_of(ref.at("ids")[i]));
    const Encoding enc = tok.encode_with_offsets(text);
    ASSERT_EQ(enc.ids, ids);
    if (ref.contains("offsets")) {
      EXPECT_EQ(enc.offsets, offsets_of(ref.at("offsets")[i]));
    } else {
      expect_offsets_consistent(tok, text, enc);
    }
    EXPECT_EQ(tok.encode_with_offsets(text, EncodeOptions{true}).ids, ids_of(ref.at("ids_split_special")[i]));
    EXPECT_EQ(tok.encode(text, EncodeOptions{true}), ids_of(ref.at("ids_split_special")[i]));
    EXPECT_EQ(tok.decode(ids, false), ref.at("decode")[i].get<std::string>());
    EXPECT_EQ(tok.decode(ids, true), ref.at("decode_skip")[i].get<std::string>());
  }
  const auto& probes = ref.at("probe_ids");
  for (size_t i = 0; i < probes.size(); ++i) {
    SCOPED_TRACE("probe #" + std::to_string(i));
    EXPECT_EQ(tok.decode(ids_of(probes[i]), false), ref.at("probe_decode")[i].get<std::string>());
    if (ref.contains("probe_decode_skip")) {
      EXPECT_EQ(tok.decode(ids_of(probes[i]), true), ref.at("probe_decode_skip")[i].get<std::string>());
    }
  }
  EXPECT_EQ(tok.prefix_tokens(), ids_of(ref.at("prefix")));
  EXPECT_EQ(tok.suffix_tokens(), ids_of(ref.at("suffix")));
  EXPECT_EQ(tok.vocab_size(), ref.at("vocab_size").get<int64_t>());
  // encode_batch on 2 threads gives the same as one by one, in order.
  std::vector<std::string> batch;
  for (const auto& t : texts) batch.push_back(t.get<std::string>());
  const auto all = tok.encode_batch(batch, 2);
  ASSERT_EQ(all.size(), batch.size());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], ids_of(ref.at("ids")[i])) << "batch item " << i;
}

fs::path json_file(const std::string& name) {
  return test::refs_dir() / name / "tokenizer.json";
}

void check_tokenizer_json(const std::string& name) {
  const json& ref = test::refs().at("tokenizer_json").at(name);
  auto tok = load_tokenizer_json(json_file(name));
  EXPECT_EQ(tok->kind(), "tokenizer.json");
  expect_matches_reference(*tok, ref);
  for (const auto& [id, token] : ref.at("id_to_token").items()) {
    const auto i = static_cast<int32_t>(std::stol(id));
    ASSERT_TRUE(tok->id_to_token(i).has_value()) << id;
    EXPECT_EQ(*tok->id_to_token(i), token.get<std::string>());
  }
  for (const auto& [token, id] : ref.at("token_to_id").items()) {
    if (id.is_null()) {
      EXPECT_FALSE(tok->token_to_id(token).has_value()) << token;
    } else {
      EXPECT_EQ(tok->token_to_id(token), id.get<int32_t>()) << token;
    }
  }
  std::vector<int32_t> specials;
  for (int32_t i = 0; i < tok->vocab_size(); ++i) {
    if (tok->is_special(i)) specials.push_back(i);
  }
  EXPECT_EQ(specials, ids_of(ref.at("special_ids")));
}

TEST(TokenizerJson, Llama3StyleMatchesTokenizersOnStressCorpus) {
  check_tokenizer_json("llama3");
}
TEST(TokenizerJson, Qwen2StyleNfcSplitByteLevelMatchesTokenizers) {
  check_tokenizer_json("qwen2");
}
TEST(TokenizerJson, Gpt2ByteLevelPrefixSpaceStringMergesMatchesTokenizers) {
  check_tokenizer_json("gpt2");
}
TEST(TokenizerJson, Llama2PrependReplaceByteFallbackMatchesTokenizers) {
  check_tokenizer_json("llama2");
}
TEST(TokenizerJson, MistralMetaspaceFirstMatchesTokenizers) {
  check_tokenizer_json("mistral");
}
TEST(TokenizerJson, GemmaStyleReplaceByteFallbackMatchesTokenizers) {
  check_tokenizer_json("gemma");
}
TEST(TokenizerJson, Phi3RstripChatTokensAndSuffixMatchTokenizers) {
  check_tokenizer_json("phi3");
}
TEST(TokenizerJson, NfkcLowercaseSplitBehavioursSubwordAffixesMatchTokenizers) {
  check_tokenizer_json("mix1");
}
TEST(TokenizerJson, AccentStripContiguousInvertMetaspaceSplitMatchTokenizers) {
  check_tokenizer_json("mix2");
}
TEST(TokenizerJson, NfkdWhitespaceSplitByteLevelPrefixMatchTokenizers) {
  check_tokenizer_json("mix3");
}
TEST(TokenizerJson, StripAccentsPunctuationDelimiterMetaspaceNeverMatchTokenizers) {
  check_tokenizer_json("mix4");
}

// Real vocabularies: Llama 3's 128k tokens / 280k merges, Mistral v3's 32k sentencepiece-derived BPE.
TEST(TokenizerJson, Llama3RealVocabularyMatchesTokenizers) {
  if (!test::refs().at("tokenizer_json").contains("llama3_real")) GTEST_SKIP() << "llama-models not installed";
  check_tokenizer_json("llama3_real");
}
TEST(TokenizerJson, MistralV3RealVocabularyMatchesTokenizers) {
  if (!test::refs().at("tokenizer_json").contains("mistral_v3_real")) GTEST_SKIP() << "mistral-common not installed";
  check_tokenizer_json("mistral_v3_real");
}

TEST(TokenizerJson, LoadTextTokenizerDetectsTokenizerJson) {
  auto tok = load_text_tokenizer(json_file("llama3"));
  EXPECT_EQ(tok->kind(), "tokenizer.json");
  EXPECT_EQ(tok->file(), json_file("llama3"));
}

// add_tokens gives the ids tokenizers' add_tokens / add_special_tokens give; the saved file, reloaded by
// `tokenizers`, encodes like we do.
TEST(SaveReload, AddTokensMatchTokenizersAndSurviveSaveReload) {
  for (const std::string name : {"llama3", "qwen2", "gpt2", "llama2", "gemma", "phi3", "mix1"}) {
    SCOPED_TRACE(name);
    const json& ref = test::refs().at("tokenizer_json").at(name).at("add_tokens");
    auto tok = load_tokenizer_json(json_file(name));
    EXPECT_EQ(tok->add_tokens(ref.at("plain").get<std::vector<std::string>>(), false), ids_of(ref.at("ids_plain")));
    EXPECT_EQ(tok->add_tokens(ref.at("special").get<std::vector<std::string>>(), true), ids_of(ref.at("ids_special")));
    const auto texts = ref.at("texts").get<std::vector<std::string>>();
    std::vector<Ids> ours;
    for (size_t i = 0; i < texts.size(); ++i) {
      ours.push_back(tok->encode(texts[i]));
      EXPECT_EQ(ours.back(), ids_of(ref.at("ids")[i])) << "text #" << i;
    }
    const fs::path dir = test::temp_dir("save_" + name);
    tok->save(dir);
    ASSERT_TRUE(fs::exists(dir / "tokenizer.json"));
    test::write_file(dir / "texts.json", json(texts).dump());
    const std::string cmd = "\"" + test::python() + "\" \"" +
                            (test::source_dir() / "tests/tokenizer/ref/encode_saved.py").string() + "\" \"" +
                            (dir / "tokenizer.json").string() + "\" \"" + (dir / "texts.json").string() + "\" \"" +
                            (dir / "out.json").string() + "\"";
    ASSERT_EQ(test::run(cmd), 0) << cmd;
    std::ifstream in(dir / "out.json");
    const json out = json::parse(in);
    for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(ours[i], ids_of(out.at("ids")[i])) << "text #" << i;
    EXPECT_EQ(out.at("vocab_size").get<int64_t>(), tok->vocab_size());
    // Our own loader reads the saved file back the same way.
    auto again = load_tokenizer_json(dir / "tokenizer.json");
    for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(again->encode(texts[i]), ours[i]);
  }
}

TEST(Tiktoken, Llama3TokenizerModelMatchesTiktokenOnStressCorpus) {
  const json& ref = test::refs().at("tiktoken");
  if (ref.is_null()) GTEST_SKIP() << "llama-models is not installed";
  const fs::path file = ref.at("file").get<std::string>();
  auto tok = load_tiktoken(file, llama3_tiktoken_spec(128000));
  EXPECT_EQ(tok->kind(), "tiktoken");
  expect_matches_reference(*tok, ref);
  for (const auto& [name, id] : ref.at("special_tokens").items()) {
    EXPECT_EQ(tok->token_to_id(name), id.get<int32_t>()) << name;
    EXPECT_EQ(tok->id_to_token(id.get<int32_t>()), name);
    EXPECT_TRUE(tok->is_special(id.get<int32_t>()));
  }
  EXPECT_EQ(tok->id_to_token(279), "Ġthe");  // byte-level spelling, as in Llama 3's tokenizer.json
  EXPECT_EQ(tok->token_to_id("Ġthe"), 279);
  EXPECT_FALSE(tok->is_special(279));
}

TEST(Tiktoken, LoadTextTokenizerDetectsTiktokenWithLlama3Specials) {
  const json& ref = test::refs().at("tiktoken");
  if (ref.is_null()) GTEST_SKIP() << "llama-models is not installed";
  auto tok = load_text_tokenizer(ref.at("file").get<std::string>());
  EXPECT_EQ(tok->kind(), "tiktoken");
  EXPECT_EQ(tok->vocab_size(), 128256);
  EXPECT_EQ(tok->prefix_tokens(), Ids{128000});
  EXPECT_EQ(tok->token_to_id("<|eot_id|>"), 128009);
  EXPECT_EQ(tok->encode("<|begin_of_text|>Hi"), (Ids{128000, 13347}));
}

TEST(Tekken, Tekken240911MatchesMistralCommonOnStressCorpus) {
  const json& all = test::refs().at("tekken");
  if (all.is_null()) GTEST_SKIP() << "mistral-common is not installed";
  const json& ref = all.at("tekken_240911.json");
  auto tok = load_tekken(ref.at("file").get<std::string>());
  EXPECT_EQ(tok->kind(), "tekken");
  expect_matches_reference(*tok, ref);
  for (const auto& [name, id] : ref.at("control").items()) {
    EXPECT_EQ(tok->token_to_id(name), id.get<int32_t>());
    EXPECT_TRUE(tok->is_special(id.get<int32_t>()));
  }
  EXPECT_FALSE(tok->is_special(ref.at("num_special").get<int32_t>()));
}

TEST(Tekken, LoadTextTokenizerDetectsTekken) {
  const json& all = test::refs().at("tekken");
  if (all.is_null()) GTEST_SKIP() << "mistral-common is not installed";
  auto tok = load_text_tokenizer(all.at("tekken_240911.json").at("file").get<std::string>());
  EXPECT_EQ(tok->kind(), "tekken");
  EXPECT_EQ(tok->vocab_size(), 131072);
  // Saving an unmodified tekken copies it; after add_tokens it refuses (the format cannot hold them).
  const fs::path dir = test::temp_dir("tekken_save");
  tok->save(dir);
  EXPECT_TRUE(fs::exists(dir / "tekken_240911.json"));
  tok->add_tokens({"<extra>"}, true);
  EXPECT_EQ(tok->encode("a<extra>b")[1], 131072);
  EXPECT_THROW(tok->save(dir), ft::ConfigError);
}

}  // namespace
}  // namespace ft::tok
