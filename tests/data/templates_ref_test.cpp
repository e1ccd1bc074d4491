// The built-in mistral-* and gemma chat templates against their references, built by tests/data/ref/templates_ref.py:
// mistral-common's encoder (ids, loss masks and refusals) for the tokenizer files it ships (v1, v2, v3 sentencepiece,
// tekken, a v3 tokenizer.json), and transformers' apply_chat_template with Gemma 3's official template (trl ships it)
// on a Gemma-like tokenizer.json. The Jinja of chat_template_jinja() must render as the C++ templates, in
// transformers and in our own Jinja engine.
#include <gtest/gtest.h>

#include <fstream>

#include "chat/chat_template.h"
#include "chat/templates.h"
#include "data_test_util.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace ft::test {
namespace {

using chat::ChatMessage;

class TemplatesRef : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>("ft-templates-ref");
    nlohmann::json in;
    for (const char* name : {"mistral-v1", "mistral-v3", "mistral-tekken", "gemma"}) {
      in["jinja"][name] = chat::chat_template_jinja(name);
    }
    write_file(dir_->path() / "in.json", in.dump());
    const auto r = run(python() + " " + shell_quote((source_dir() / "tests/data/ref/templates_ref.py").string()) + " " +
                       shell_quote((dir_->path() / "in.json").string()) + " " + shell_quote(dir_->path().string()));
    if (r.exit_code != 0) {
      skip_reason_ = "templates_ref.py failed (reference packages missing?): " + r.output.substr(0, 600);
      return;
    }
    std::ifstream file(dir_->path() / "templates_ref.json");
    ref_ = nlohmann::json::parse(file);
  }
  static void TearDownTestSuite() { dir_.reset(); }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }
  static inline std::unique_ptr<TempDir> dir_;
  static inline nlohmann::json ref_;
  static inline std::string skip_reason_;
};

std::vector<chat::ChatMessage> messages_of(const nlohmann::json& j) {
  std::vector<chat::ChatMessage> out;
  for (const auto& m : j) out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

std::vector<int64_t> ids_of(const chat::TokenizedSample& s) {
  return {s.tokens.begin(), s.tokens.end()};
}

// mistral-common's message after its exception class name ("InvalidMessageStructureException: ...").
std::string reference_message(const nlohmann::json& c) {
  const auto e = c["error"].get<std::string>();
  const auto colon = e.find(": ");
  std::string message = colon == std::string::npos ? e : e.substr(colon + 2);
  if (!message.empty() && message.back() == '.') message.pop_back();
  return message;
}

TEST_F(TemplatesRef, MistralIdsAndLossMatchMistralCommon) {
  const auto& m = ref_["mistral"];
  for (const auto& [name, t] : m["tokenizers"].items()) {
    const auto tok = tok::Tokenizer::load(t["path"].get<std::string>());
    const std::string variant = chat::resolve_template("mistral", *tok);
    EXPECT_EQ(variant, t["variant"].get<std::string>()) << name;
    for (const char* part : {"cases", "prompts"}) {
      const bool prompt = std::string(part) == "prompts";
      const auto& convs = m[prompt ? "prompts" : "conversations"];
      for (size_t i = 0; i < convs.size(); ++i) {
        const auto msgs = messages_of(convs[i]);
        const auto& c = t[part][i];
        if (c.contains("error")) {  // refused by mistral-common: refused here, as a bad record (not a config error)
          try {
            chat::render_chat(variant, msgs, prompt);
            ADD_FAILURE() << name << ": expected an error like '" << c["error"] << "' for " << convs[i].dump();
          } catch (const ConfigError& e) {
            ADD_FAILURE() << name << ": a conversation error must not be a ConfigError: " << e.what();
          } catch (const Error& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find("mistral template"), std::string::npos) << what;
            if (!prompt) {
              EXPECT_NE(what.find(reference_message(c)), std::string::npos) << what << " vs " << c["error"];
            }
          }
          continue;
        }
        // A tokenizer.json converted from the sentencepiece model encodes runs of spaces its own way: there the ids
        // are the conversion's, not mistral-common's.
        if (c.contains("same_as_sentencepiece") && !c["same_as_sentencepiece"].get<bool>()) continue;
        const auto sample = chat::tokenize_segments(*tok, chat::render_chat(variant, msgs, prompt));
        EXPECT_EQ(ids_of(sample), c["ids"].get<std::vector<int64_t>>()) << name << " " << convs[i].dump();
        EXPECT_EQ(std::vector<int>(sample.loss.begin(), sample.loss.end()), c["loss"].get<std::vector<int>>())
            << name << " " << convs[i].dump();
      }
    }
  }
}

TEST_F(TemplatesRef, MistralJinjaRendersAsTheCppTemplateInTransformersAndOurEngine) {
  const auto& m = ref_["mistral"];
  const auto tok = tok::Tokenizer::load(m["tokenizers"]["v3_json"]["path"].get<std::string>());
  for (const auto& [variant, j] : m["jinja"].items()) {
    const chat::JinjaChat ours({chat::chat_template_jinja(variant), variant}, *tok);
    for (const char* part : {"cases", "prompts"}) {
      const bool prompt = std::string(part) == "prompts";
      const auto& convs = m[prompt ? "prompts" : "conversations"];
      for (size_t i = 0; i < convs.size(); ++i) {
        const auto& expected = j[part][i];
        const auto msgs = messages_of(convs[i]);
        const auto messages = jinja::Value::parse(convs[i].dump());
        if (expected.is_object()) {  // the Jinja raised: so does the C++ template, and our engine
          EXPECT_THROW(chat::render_chat(variant, msgs, prompt), Error) << variant << " " << convs[i].dump();
          EXPECT_THROW(ours.render(messages, prompt, false), Error) << variant << " " << convs[i].dump();
          continue;
        }
        const auto text = chat::segments_to_string(chat::render_chat(variant, msgs, prompt));
        EXPECT_EQ(text, expected.get<std::string>()) << variant << " " << convs[i].dump();
        EXPECT_EQ(ours.render(messages, prompt, false).text, text) << variant << " " << convs[i].dump();
      }
    }
  }
}

TEST_F(TemplatesRef, MistralV7FormatsAreRefusedWithAHint) {
  for (const auto& path : ref_["mistral"]["v7"]) {
    const auto tok = tok::Tokenizer::load(path.get<std::string>());
    try {
      chat::resolve_template("mistral", *tok);
      ADD_FAILURE() << "a v7 tokenizer must be refused: " << path;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("v7"), std::string::npos) << e.what();
      EXPECT_NE(e.hint().find("auto"), std::string::npos) << e.hint();
    }
  }
}

TEST_F(TemplatesRef, GemmaMatchesTheOfficialTemplateTextIdsAndLoss) {
  const auto& g = ref_["gemma"];
  const auto tok = tok::Tokenizer::load(g["dir"].get<std::string>());
  EXPECT_NO_THROW(chat::check_template_markers("gemma", *tok));
  const chat::JinjaChat ours({chat::chat_template_jinja("gemma"), "gemma"}, *tok);
  const int64_t eot = tok->piece_to_id("<end_of_turn>");
  for (const auto& c : g["cases"]) {
    const auto msgs = messages_of(c["messages"]);
    const bool gen = c["gen"].get<bool>();
    const auto messages = jinja::Value::parse(c["messages"].dump());
    if (c.contains("error")) {  // the official template raises; so do ours (C++ and Jinja)
      EXPECT_THROW(chat::render_chat("gemma", msgs, gen), Error) << c["messages"].dump();
      EXPECT_TRUE(c["ours"].is_object()) << c["ours"].dump();
      EXPECT_THROW(ours.render(messages, gen, false), Error) << c["messages"].dump();
      continue;
    }
    const auto segments = chat::render_chat("gemma", msgs, gen);
    const auto text = chat::segments_to_string(segments, "<bos>", "<eos>");
    EXPECT_EQ(text, c["text"].get<std::string>()) << c["messages"].dump();
    EXPECT_EQ(c["ours"], c["text"]) << "our Jinja in transformers";
    EXPECT_EQ(ours.render(messages, gen, false).text, text) << "our Jinja in our engine";
    const auto sample = chat::tokenize_segments(*tok, segments);
    // Contents spelling <end_of_turn> stay text; otherwise exactly apply_chat_template's ids.
    EXPECT_EQ(ids_of(sample), c["ids"].get<std::vector<int64_t>>()) << c["messages"].dump();
    EXPECT_EQ(std::vector<int>(sample.loss.begin(), sample.loss.end()), c["loss"].get<std::vector<int>>())
        << c["messages"].dump();
    // Every model turn is trained through its <end_of_turn>.
    size_t model_turns = 0, trained_eot = 0;
    for (const auto& m : msgs) model_turns += m.role == "assistant";
    for (size_t i = 0; i < sample.tokens.size(); ++i) trained_eot += sample.tokens[i] == eot && sample.loss[i];
    EXPECT_EQ(trained_eot, model_turns) << c["messages"].dump();
  }
}

// `config validate` names the variant data.template mistral stands for with the tokenizer, refuses markers the
// tokenizer lacks and a v7 tokenizer, with exit code 2.
TEST_F(TemplatesRef, ValidateResolvesMistralAndChecksMarkers) {
  const auto cfg = dir_->path() / "validate.yaml";
  const auto data = dir_->path() / "chat.jsonl";
  std::ofstream(data) << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})"
                      << "\n";
  auto validate = [&](const std::string& tokenizer, const std::string& tmpl) {
    std::ofstream(cfg) << "tokenizer: {path: " << tokenizer << "}\n"
                       << "data: {train: [{path: " << data.string() << ", format: chat}], template: " << tmpl << "}\n";
    return run_finetune("config validate --config " + shell_quote(cfg.string()));
  };
  const auto& toks = ref_["mistral"]["tokenizers"];
  auto r = validate(toks["v3"]["path"].get<std::string>(), "mistral");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("chat template: built-in mistral-v3 (data.template mistral)"), std::string::npos) << r.output;
  r = validate(toks["tekken"]["path"].get<std::string>(), "mistral");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("built-in mistral-tekken"), std::string::npos) << r.output;
  r = validate(toks["v1"]["path"].get<std::string>(), "mistral-v3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no single token for [INST] [/INST]"), std::string::npos) << r.output;
  r = validate(toks["v3"]["path"].get<std::string>(), "gemma");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no single token for <start_of_turn> <end_of_turn>"), std::string::npos) << r.output;
  r = validate(ref_["mistral"]["v7"][0].get<std::string>(), "mistral");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("v7 format"), std::string::npos) << r.output;
}

// A run with data.template mistral writes, with its model, the Jinja of the variant its tokenizer resolved to, so
// apply_chat_template on the export formats prompts as training did.
TEST_F(TemplatesRef, TrainingWithMistralExportsTheResolvedVariantsTemplate) {
  const auto d = dir_->path() / "mistral-run";
  std::filesystem::create_directories(d);
  std::ofstream(d / "chat.jsonl") << R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})"
                                  << "\n";
  const auto config = d / "run.yaml";
  std::ofstream(config) << "run: {name: m, output_dir: " << (d / "run").string() << ", device: cpu}\n"
                        << "tokenizer: {path: " << ref_["mistral"]["tokenizers"]["v3"]["path"].get<std::string>()
                        << "}\n"
                        << "model: {hidden_size: 16, intermediate_size: 32, num_layers: 1, num_heads: 2, "
                           "num_kv_heads: 1, max_position_embeddings: 64}\n"
                        << "data: {train: [{path: " << (d / "chat.jsonl").string() << ", format: chat}], "
                        << "template: mistral, seq_len: 32, cache_dir: " << (d / "cache").string() << "}\n"
                        << "train: {max_steps: 1, micro_batch_size: 1, precision: fp32}\n"
                        << "checkpoint: {every_steps: 0, resume: never}\neval: {every_steps: 0}\n"
                        << "logging: {progress: \"off\"}\n";
  const auto r = run_finetune("train --config " + shell_quote(config.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream file(d / "run" / "model" / "tokenizer_config.json");
  const auto tokenizer_config = nlohmann::json::parse(file);
  ASSERT_TRUE(tokenizer_config.contains("chat_template")) << tokenizer_config.dump(2);
  EXPECT_EQ(tokenizer_config.at("chat_template").get<std::string>(), chat::chat_template_jinja("mistral-v3"));
}

}  // namespace
}  // namespace ft::test
