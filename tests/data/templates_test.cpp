// Chat templates: exact renderings (literal strings from the official templates, and the Jinja source rendered by
// jinja2 as transformers does) and the loss mask of tokenized conversations.
#include <gtest/gtest.h>

#include "chat/templates.h"
#include "data_test_util.h"

namespace ft::test {
namespace {

using chat::ChatMessage;

const std::vector<chat::ChatMessage> kChat = {{"system", "You are terse."},
                                              {"user", " Hi there "},
                                              {"assistant", "Hello! "},
                                              {"user", "2+2?"},
                                              {"assistant", "4"}};

std::string render(const std::string& name, bool gen = false, const std::vector<chat::ChatMessage>& m = kChat) {
  const bool llama3 = name == "llama3";
  return chat::segments_to_string(chat::render_chat(name, m, gen), llama3 ? "<|begin_of_text|>" : "<s>",
                                  llama3 ? "<|eot_id|>" : "</s>");
}

TEST(Templates, RenderTheOfficialStrings) {
  EXPECT_EQ(render("llama2"),
            "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\n Hi there [/INST] Hello! </s><s>[INST] 2+2? [/INST] 4 </s>");
  EXPECT_EQ(render("llama3"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>");
  EXPECT_EQ(render("chatml"),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n Hi there <|im_end|>\n"
            "<|im_start|>assistant\nHello! <|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n4<|im_end|>\n");
  EXPECT_EQ(render("plain"), "<s>You are terse.\n Hi there \nHello! </s>2+2?\n4</s>");
  // Gemma 3: the system message opens the first user turn; contents trimmed.
  EXPECT_EQ(render("gemma"),
            "<s><start_of_turn>user\nYou are terse.\n\nHi there<end_of_turn>\n"
            "<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\n2+2?<end_of_turn>\n"
            "<start_of_turn>model\n4<end_of_turn>\n");
  // mistral-common: v1 puts the system prompt before the first user message, v3/tekken before the last; a space
  // shows sentencepiece's word marker before each message encoded on its own.
  EXPECT_EQ(render("mistral-v1"),
            "<s>[INST] You are terse.\n\n Hi there  [/INST] Hello! </s>[INST] 2+2? [/INST] 4</s>");
  EXPECT_EQ(render("mistral-v3"), "<s>[INST]  Hi there [/INST] Hello!</s>[INST] You are terse.\n\n2+2?[/INST] 4</s>");
  EXPECT_EQ(render("mistral-tekken"), "<s>[INST] Hi there [/INST]Hello!</s>[INST]You are terse.\n\n2+2?[/INST]4</s>");
}

TEST(Templates, JinjaSourcesRenderLikeTheCppTemplates) {
  nlohmann::json input;
  nlohmann::json msgs = nlohmann::json::array();
  for (const auto& m : kChat) msgs.push_back({{"role", m.role}, {"content", m.content}});
  const std::vector<chat::ChatMessage> prompt(kChat.begin(), kChat.end() - 1);
  nlohmann::json prompt_msgs(msgs.begin(), msgs.end() - 1);
  input["messages"] = msgs;
  input["prompt"] = prompt_msgs;
  for (const auto& name : chat::template_names()) input["templates"][name] = chat::chat_template_jinja(name);
  // As transformers' apply_chat_template: trim_blocks, lstrip_blocks, raise_exception.
  const auto ref = run_python(R"(
import json, sys, jinja2
a = json.load(open(sys.argv[1]))
env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
def raise_exception(m): raise Exception(m)
env.globals["raise_exception"] = raise_exception
out = {}
for name, src in a["templates"].items():
    bos, eos = ("<|begin_of_text|>", "<|eot_id|>") if name == "llama3" else ("<s>", "</s>")
    t = env.from_string(src)
    out[name] = [t.render(messages=a["messages"], bos_token=bos, eos_token=eos, add_generation_prompt=False),
                 t.render(messages=a["prompt"], bos_token=bos, eos_token=eos, add_generation_prompt=True)]
print(json.dumps(out))
)",
                              input);
  for (const auto& name : chat::template_names()) {
    EXPECT_EQ(render(name), ref[name][0].get<std::string>()) << name;
    EXPECT_EQ(render(name, true, prompt), ref[name][1].get<std::string>()) << name;
  }
}

TEST(Templates, BadConversationsAreErrors) {
  EXPECT_THROW(chat::render_chat("llama2", {{"user", "a"}, {"user", "b"}}), Error);
  EXPECT_THROW(chat::render_chat("chatml", {{"user", "a"}, {"system", "late"}}), Error);
  EXPECT_THROW(chat::render_chat("chatml", {{"robot", "a"}}), Error);
  EXPECT_THROW(chat::render_chat("nope", {{"user", "a"}}), ConfigError);
  EXPECT_THROW(chat::render_chat("mistral", {{"user", "a"}, {"assistant", "b"}}), ConfigError);  // not resolved
  EXPECT_THROW(chat::render_chat("gemma", {{"user", "a"}, {"user", "b"}}), Error);
  EXPECT_THROW(chat::render_chat("gemma", {{"assistant", "a"}}), Error);
  // mistral-common's refusals: a system message after an assistant one, a training conversation that does not end
  // with the assistant, an empty assistant message.
  EXPECT_THROW(
      chat::render_chat("mistral-v3",
                        {{"user", "a"}, {"assistant", "b"}, {"system", "c"}, {"user", "d"}, {"assistant", "e"}}),
      Error);
  EXPECT_THROW(chat::render_chat("mistral-v1", {{"user", "a"}, {"assistant", "b"}, {"user", "c"}}), Error);
  EXPECT_THROW(chat::render_chat("mistral-tekken", {{"user", "a"}, {"assistant", ""}}), Error);
  EXPECT_NO_THROW(chat::render_chat("mistral-tekken", {{"user", "a"}, {"assistant", "b"}, {"user", "c"}}, true));
}

TEST(Templates, Llama3LossCoversAssistantContentAndEotOnly) {
  const auto tok = load_test_tokenizer();
  const std::vector<chat::ChatMessage> chat = {{"user", "hello there"}, {"assistant", "hi, how can I help?"}};
  const auto s = chat::tokenize_segments(*tok, chat::render_chat("llama3", chat));
  const int64_t sh = tok->piece_to_id("<|start_header_id|>"), eh = tok->piece_to_id("<|end_header_id|>"),
                eot = tok->piece_to_id("<|eot_id|>");
  // Expected ids built piece by piece: specials are single ids, text runs are encoded on their own.
  std::vector<int64_t> expect = {tok->bos_id(), sh};
  std::vector<uint8_t> loss = {0, 0};
  auto add = [&](const std::vector<int64_t>& ids, uint8_t l) {
    expect.insert(expect.end(), ids.begin(), ids.end());
    loss.insert(loss.end(), ids.size(), l);
  };
  add(tok->encode("user"), 0);
  add({eh}, 0);
  add(tok->encode("\n\nhello there"), 0);
  add({eot, sh}, 0);
  add(tok->encode("assistant"), 0);
  add({eh}, 0);
  add(tok->encode("\n\n"), 0);
  add(tok->encode("hi, how can I help?"), 1);
  add({eot}, 1);
  EXPECT_EQ(std::vector<int64_t>(s.tokens.begin(), s.tokens.end()), expect);
  EXPECT_EQ(s.loss, loss);
}

}  // namespace
}  // namespace ft::test
