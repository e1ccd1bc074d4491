// The model's own chat template (data.template auto) against transformers' apply_chat_template: real vocabularies
// (Llama 3, Mistral v3) and real templates (Llama 3.1, Mistral, Phi-3, Qwen3-style) from pinned PyPI packages, built
// by tests/data/ref/chat_ref.py. Rendered text and ids must be identical; the loss must cover each assistant turn
// (content and end-of-turn marker) and nothing a user wrote.
#include <gtest/gtest.h>

#include <fstream>

#include "chat/chat_template.h"
#include "data/records.h"
#include "data_test_util.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace ft::test {
namespace {

class ChatTemplate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>("ft-chat-ref");
    const auto r = run(python() + " " + shell_quote((source_dir() / "tests/data/ref/chat_ref.py").string()) + " " +
                       shell_quote(dir_->path().string()));
    if (r.exit_code != 0) {
      skip_reason_ = "chat_ref.py failed (reference packages missing?): " + r.output.substr(0, 400);
      return;
    }
    std::ifstream in(dir_->path() / "chat_ref.json");
    ref_ = nlohmann::json::parse(in);
  }
  static void TearDownTestSuite() { dir_.reset(); }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }
  static inline std::unique_ptr<TempDir> dir_;
  static inline nlohmann::json ref_;
  static inline std::string skip_reason_;
};

std::string trained_text(const chat::RenderedChat& r) {
  std::string s;
  for (const auto& [b, e] : r.trained) s += r.text.substr(b, e - b);
  return s;
}

TEST_F(ChatTemplate, RealTemplatesRenderAndTokenizeAsApplyChatTemplate) {
  for (const auto& [name, model] : ref_.items()) {
    const std::filesystem::path dir = model["dir"].get<std::string>();
    const auto tok = tok::Tokenizer::load(dir);
    const auto source = chat::find_chat_template(dir);
    ASSERT_TRUE(source.has_value()) << name;
    const chat::JinjaChat chat(*source, *tok);
    for (const auto& c : model["cases"]) {
      const jinja::Value messages = jinja::Value::parse(c["messages"].dump());
      if (c.contains("error")) {  // the template's raise_exception, with its message
        try {
          chat.render(messages, false, false);
          ADD_FAILURE() << name << ": expected the template to raise '" << c["error"] << "'";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find(c["error"].get<std::string>()), std::string::npos) << e.what();
        }
        continue;
      }
      const auto rendered = chat.render(messages, false, false);
      EXPECT_EQ(rendered.text, c["text"].get<std::string>()) << name;
      // Exactly apply_chat_template's ids when content is taken as the template gives it.
      const auto exact = chat.tokenize(rendered, /*split_special_in_content=*/false);
      EXPECT_EQ(std::vector<int64_t>(exact.tokens.begin(), exact.tokens.end()), c["ids"].get<std::vector<int64_t>>())
          << name << ": " << c["messages"].dump();
    }
  }
}

TEST_F(ChatTemplate, LossCoversAssistantTurnsWithTheirEndMarkerAndNoUserText) {
  for (const auto& [name, model] : ref_.items()) {
    const std::filesystem::path dir = model["dir"].get<std::string>();
    const auto tok = tok::Tokenizer::load(dir);
    const chat::JinjaChat chat(*chat::find_chat_template(dir), *tok);
    for (const auto& c : model["cases"]) {
      if (c.contains("error")) continue;
      const jinja::Value messages = jinja::Value::parse(c["messages"].dump());
      const auto rendered = chat.render(messages, false, false);
      const std::string trained = trained_text(rendered);
      size_t assistants = 0;
      for (const auto& m : c["messages"]) {
        const auto content = m["content"].get<std::string>();
        if (m["role"] == "assistant") {
          ++assistants;
          // Templates may trim: the trimmed content is in the trained text.
          const auto b = content.find_first_not_of(" \n"), e = content.find_last_not_of(" \n");
          EXPECT_NE(trained.find(content.substr(b, e - b + 1)), std::string::npos) << name << ": " << content;
        } else if (!content.empty() && content != "Out of order") {
          EXPECT_EQ(trained.find(content), std::string::npos) << name << ": user text trained: " << content;
        }
      }
      EXPECT_EQ(rendered.trained.size(), assistants) << name;
      // Each trained turn ends with the template's end-of-turn token (a special token).
      const auto sample = chat.tokenize(rendered);
      for (size_t i = 0; i < sample.loss.size(); ++i) {
        const bool run_ends = sample.loss[i] && (i + 1 == sample.loss.size() || !sample.loss[i + 1]);
        if (run_ends) {
          EXPECT_TRUE(tok->is_special(sample.tokens[i])) << name << ": " << tok->id_to_piece(sample.tokens[i]);
        }
      }
      // last_only keeps one turn: the last.
      const auto last = chat.render(messages, false, /*last_only=*/true);
      ASSERT_EQ(last.trained.size(), 1u) << name;
      EXPECT_EQ(last.trained.back(), rendered.trained.back()) << name;
    }
  }
}

TEST_F(ChatTemplate, TokenizerCliEncodesAModelDirectoryAsTransformers) {
  for (const char* name : {"llama31", "mistral"}) {
    const auto& c = ref_[name]["cases"][0];
    const auto r =
        run_finetune("tokenizer encode --json --tokenizer " + shell_quote(ref_[name]["dir"].get<std::string>()) +
                     " --text " + shell_quote(c["text"].get<std::string>()));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto out = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    EXPECT_EQ(out["kind"], "tokenizer.json");
    EXPECT_EQ(out["ids"], c["ids"]) << name;
  }
}

// `config validate` names the template chat data would use, and refuses a built-in one whose markers the
// tokenizer lacks (they would be trained as text) with exit code 2.
TEST_F(ChatTemplate, ValidateNamesTheTemplateAndRefusesMarkersTheTokenizerLacks) {
  const auto cfg = dir_->path() / "validate.yaml";
  const auto data = dir_->path() / "chat.jsonl";
  std::ofstream(data) << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})"
                      << "\n";
  auto validate = [&](const std::string& name, const std::string& tmpl) {
    std::ofstream(cfg) << "tokenizer: {path: " << ref_[name]["dir"].get<std::string>() << "}\n"
                       << "data: {train: [{path: " << data.string() << ", format: chat}], template: " << tmpl << "}\n";
    return run_finetune("config validate --config " + shell_quote(cfg.string()));
  };
  auto r = validate("llama31", "auto");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("chat template: the model's own"), std::string::npos) << r.output;
  r = validate("mistral", "chatml");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no single token for <|im_start|> <|im_end|>"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(R"(tokenizer.add_tokens: ["<|im_start|>", "<|im_end|>"])"), std::string::npos) << r.output;
}

TEST_F(ChatTemplate, MarkerTextInUserContentStaysTextByDefault) {
  const auto& model = ref_["llama31"];
  const std::filesystem::path dir = model["dir"].get<std::string>();
  const auto tok = tok::Tokenizer::load(dir);
  const chat::JinjaChat chat(*chat::find_chat_template(dir), *tok);
  const auto& c = model["cases"][4];  // content spelling <|eot_id|>
  const auto rendered = chat.render(jinja::Value::parse(c["messages"].dump()), false, false);
  const auto safe = chat.tokenize(rendered);
  const auto exact = chat.tokenize(rendered, false);
  const int64_t eot = tok->piece_to_id("<|eot_id|>");
  auto count = [&](const chat::TokenizedSample& s) { return std::count(s.tokens.begin(), s.tokens.end(), eot); };
  EXPECT_EQ(count(exact), count(safe) + 2);  // the user's and the assistant's spelled <|eot_id|>
  EXPECT_EQ(count(safe), 3);                 // the template's own: system, user and assistant turns
}

}  // namespace
}  // namespace ft::test

namespace ft::test {
namespace {

// ShareGPT's conversations and a system column give the same sample as the OpenAI-style messages they stand for;
// an unknown speaker is an error naming the field.
// Gemma 3 4B+ ship their template for the processor too (chat_template.json); it serves where the tokenizer files
// carry none, and a tokenizer's own template wins over it, as transformers' tokenizer reads only its own.
TEST(ChatTemplateFiles, ProcessorTemplateServesWhenTheTokenizerHasNone) {
  TempDir dir;
  write_file(dir / "chat_template.json", R"({"chat_template": "{{ messages[0]['content'] }}"})");
  auto found = chat::find_chat_template(dir.path());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->text, "{{ messages[0]['content'] }}");
  EXPECT_EQ(found->origin, dir / "chat_template.json");
  write_file(dir / "tokenizer_config.json", R"({"model_max_length": 8})");
  found = chat::find_chat_template(dir.path());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->origin, dir / "chat_template.json");
  write_file(dir / "tokenizer_config.json", R"({"chat_template": "tokenizer's"})");
  EXPECT_EQ(chat::find_chat_template(dir.path())->text, "tokenizer's");
  std::filesystem::remove(dir / "tokenizer_config.json");
  write_file(dir / "chat_template.json", R"({"chat_template": 3})");
  EXPECT_THROW(chat::find_chat_template(dir.path()), ConfigError);
}

TEST(ChatRecords, ShareGptAndSystemColumnAreMessages) {
  const auto tok = load_test_tokenizer();
  data::RecordOptions o;
  o.format = data::Format::kChat;
  o.template_name = "chatml";
  const auto openai = data::tokenize_record(
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
          {"role": "assistant", "content": "hello"}]})",
      o, *tok);
  const auto sharegpt = data::tokenize_record(
      R"({"system": "Be brief.", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]})",
      o, *tok);
  EXPECT_EQ(sharegpt.tokens, openai.tokens);
  EXPECT_EQ(sharegpt.loss, openai.loss);
  try {
    data::tokenize_record(R"({"conversations": [{"from": "robot", "value": "x"}]})", o, *tok);
    ADD_FAILURE() << "an unknown speaker must be refused";
  } catch (const data::RecordError& e) {
    EXPECT_EQ(e.field(), "conversations[0].from");
  }
}

// The shapes users bring are one conversation: Alpaca (instruction/input/output) and prompt/completion records as a
// single user/assistant turn, custom role names through data.roles, and data.system_prompt for conversations
// without a system turn (a record's own system turn or column wins).
TEST(ChatRecords, AlpacaPromptCompletionRoleMapAndDefaultSystemAreMessages) {
  const auto tok = load_test_tokenizer();
  data::RecordOptions o;
  o.format = data::Format::kChat;
  o.template_name = "chatml";
  auto tokens = [&](const std::string& line) { return data::tokenize_record(line, o, *tok); };
  const auto openai = tokens(
      R"j({"messages": [{"role": "user", "content": "Add 2 and 3.\n\n(show work)"}, {"role": "assistant", "content": "5"}]})j");
  const auto alpaca = tokens(R"j({"instruction": "Add 2 and 3.", "input": "(show work)", "output": "5"})j");
  EXPECT_EQ(alpaca.tokens, openai.tokens);
  EXPECT_EQ(alpaca.loss, openai.loss);
  const auto pc = tokens(R"j({"prompt": "Add 2 and 3.\n\n(show work)", "completion": "5"})j");
  EXPECT_EQ(pc.tokens, openai.tokens);

  o.roles = {{"customer", "user"}, {"bot", "assistant"}};
  const auto mapped = tokens(
      R"j({"messages": [{"role": "customer", "content": "Add 2 and 3.\n\n(show work)"}, {"role": "bot", "content": "5"}]})j");
  EXPECT_EQ(mapped.tokens, openai.tokens);
  EXPECT_EQ(mapped.loss, openai.loss);
  const auto mapped_sharegpt = tokens(
      R"j({"conversations": [{"from": "customer", "value": "Add 2 and 3.\n\n(show work)"}, {"from": "bot", "value": "5"}]})j");
  EXPECT_EQ(mapped_sharegpt.tokens, openai.tokens);

  o.system_prompt = "Be brief.";
  const auto with_default = tokens(R"j({"instruction": "Add 2 and 3.", "input": "(show work)", "output": "5"})j");
  const auto explicit_system = tokens(
      R"j({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add 2 and 3.\n\n(show work)"}, {"role": "assistant", "content": "5"}]})j");
  EXPECT_EQ(with_default.tokens, explicit_system.tokens);
  EXPECT_EQ(with_default.loss, explicit_system.loss);
  const auto own_system = tokens(
      R"j({"messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})j");
  const std::string rendered = tok->decode(std::vector<int64_t>(own_system.tokens.begin(), own_system.tokens.end()));
  EXPECT_NE(rendered.find("Be kind."), std::string::npos) << rendered;
  EXPECT_EQ(rendered.find("Be brief."), std::string::npos) << rendered;

  o.roles.clear();
  o.system_prompt.clear();
  try {
    tokens(R"j({"messages": [{"role": "bot", "content": "x"}]})j");
    ADD_FAILURE() << "an unmapped role must be refused";
  } catch (const data::RecordError& e) {
    EXPECT_EQ(e.field(), "messages[0].role");
    EXPECT_NE(std::string(e.what()).find("data.roles"), std::string::npos) << e.what();
  }
  try {
    tokens(R"j({"question": "x"})j");
    ADD_FAILURE() << "a record without a conversation must be refused";
  } catch (const data::RecordError& e) {
    EXPECT_EQ(e.field(), "messages");
  }
}

}  // namespace
}  // namespace ft::test

namespace ft::test {
namespace {

// The special ids of the other tokenizer kinds, from real files that pinned packages ship: Mistral's tekken and v3
// sentencepiece model (mistral-common), Llama 3's tiktoken file (llama-models). In a sentencepiece model, text that
// spells a control piece ([INST]) becomes that piece where the template writes it, as transformers' slow
// LlamaTokenizer does, and the text between is encoded on its own (Python sentencepiece gives the reference).
TEST(TokenizerKinds, RealTekkenTiktokenAndSentencepieceFilesGiveTheirSpecialIds) {
  nlohmann::json files;
  try {
    files = run_python(
        "import json, os, sys, mistral_common, sentencepiece as spm, llama_models.llama3.tokenizer as t\n"
        "d = os.path.dirname(mistral_common.__file__) + '/data'\n"
        "v3 = d + '/mistral_instruct_tokenizer_240323.model.v3'\n"
        "print(json.dumps({'tekken': d + '/tekken_240911.json', 'v3': v3,\n"
        "  'tiktoken': os.path.dirname(t.__file__) + '/tokenizer.model',\n"
        "  'between': spm.SentencePieceProcessor(model_file=v3).encode(' hi ')}))\n",
        nlohmann::json::object());
  } catch (const std::exception& e) {
    GTEST_SKIP() << "reference packages missing: " << e.what();
  }
  const auto tekken = tok::Tokenizer::load(files["tekken"].get<std::string>());
  EXPECT_EQ(tekken->kind(), "tekken");
  EXPECT_EQ(tekken->bos_id(), 1);
  EXPECT_EQ(tekken->eos_id(), 2);
  const auto llama3 = tok::Tokenizer::load(files["tiktoken"].get<std::string>());
  EXPECT_EQ(llama3->kind(), "tiktoken");
  EXPECT_EQ(llama3->bos_id(), 128000);
  EXPECT_EQ(llama3->eos_id(), 128001);
  EXPECT_TRUE(llama3->is_special(128009));
  const auto v3 = tok::Tokenizer::load(files["v3"].get<std::string>());
  EXPECT_EQ(v3->kind(), "sentencepiece");
  const auto enc = v3->encode_with_offsets("[INST] hi [/INST]");
  std::vector<int64_t> expected{3};
  for (const auto& id : files["between"]) expected.push_back(id.get<int64_t>());
  expected.push_back(4);
  EXPECT_EQ(enc.ids, expected);
  ASSERT_EQ(enc.offsets.size(), enc.ids.size());
  EXPECT_EQ(enc.offsets.front(), std::make_pair(size_t{0}, size_t{6}));
  EXPECT_EQ(enc.offsets.back(), std::make_pair(size_t{10}, size_t{17}));
  // split_special keeps the spelling as text.
  const auto as_text = v3->encode_with_offsets("[INST] hi [/INST]", /*split_special=*/true).ids;
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 3), 0);
}

}  // namespace
}  // namespace ft::test
