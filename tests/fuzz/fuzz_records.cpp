// Dataset records (JSON Lines or a JSON array file) of every format: text, prompt_completion, alpaca, chat (OpenAI
// messages, ShareGPT conversations, single turns), through the built-in templates or a model's own Jinja template.
// Mode byte: bits 0-1 the format, bit 2 read the payload as a file (RecordReader, small limits) and parse every
// record, bit 3 chat through a Jinja template (data.template: auto), bit 4 no BOS/EOS, bit 5 role names and a
// system prompt, bits 6-7 the built-in template. Each record is parsed and tokenized; a tokenized sample has one
// loss flag per token and every id inside the vocabulary.
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "data/json_records.h"
#include "data/records.h"
#include "fuzz_data.h"

namespace ft::fuzz {
namespace {

std::unique_ptr<tok::Tokenizer> tokenizer;
std::unique_ptr<chat::JinjaChat> jinja_chat;

void parse_one(std::string_view line, const data::RecordOptions& options) {
  try {
    data::parse_record(line, options);
    const auto sample = data::tokenize_record(line, options, *tokenizer);
    if (sample.tokens.size() != sample.loss.size()) __builtin_trap();
    for (const int32_t id : sample.tokens) {
      if (id < 0 || id >= tokenizer->vocab_size()) __builtin_trap();
    }
  } catch (const data::RecordError&) {  // the documented refusal of one record; the dataset adds file:line
  } catch (const ft::Error&) {
  }
}

}  // namespace

void target_setup() {
  tokenizer = tok::Tokenizer::load(small_tokenizer_model());
  const chat::ChatTemplateSource source{
      "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      scratch() / "chat_template.jinja"};
  jinja_chat = std::make_unique<chat::JinjaChat>(source, *tokenizer);
}

std::vector<std::string> seeds() {
  return {
      with_mode(0, R"({"text": "The quick brown fox"})"),
      with_mode(1, R"({"prompt": "Reverse: 1 2 3\nAnswer:", "completion": " 3 2 1"})"),
      with_mode(2, R"({"instruction": "Say hi", "input": "politely", "output": "Hello!"})"),
      with_mode(3, R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},)"
                   R"( {"role": "assistant", "content": "Hello"}]})"),
      with_mode(3 | 32, R"({"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}],)"
                        R"( "system": "Be kind."})"),
      with_mode(3 | 8, R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "A"},)"
                       R"( {"role": "user", "content": "More"}, {"role": "assistant", "content": "B"}]})"),
      with_mode(3 | 64, R"({"instruction": "Name a color", "output": "Blue"})"),
      with_mode(1 | 4, "{\"prompt\": \"a\", \"completion\": \"b\"}\n\n{\"prompt\": \"c\", \"completion\": \"d\"}\n"),
      with_mode(0 | 4, R"([{"text": "one"}, {"text": "two"}])"),
      with_mode(3 | 128 | 16, R"({"messages": [{"role": "user", "content": "Hi"},)"
                              R"( {"role": "assistant", "content": "Hello", "tool_calls": []}]})"),
  };
}

}  // namespace ft::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ft;
  const auto input = fuzz::split_mode(data, size);
  const data::Format formats[] = {data::Format::kText, data::Format::kPromptCompletion, data::Format::kAlpaca,
                                  data::Format::kChat};
  data::RecordOptions options;
  options.format = formats[input.mode & 3];
  if (input.mode & 8) options.chat = fuzz::jinja_chat.get();
  options.last_turn_only = (input.mode & 24) == 24;
  options.add_bos = options.add_eos = (input.mode & 16) == 0;
  if (input.mode & 32) {
    options.roles = {{"human", "user"}, {"bot", "assistant"}, {"narrator", "system"}};
    options.system_prompt = "You are a test.";
  }
  const auto& names = chat::template_names();
  options.template_name = names[(input.mode >> 6) % names.size()];
  if (input.mode & 4) {
    const auto file = fuzz::scratch() / "records.jsonl";
    fuzz::write_bytes(file, input.payload);
    fuzz::accepted([&] {
      data::RecordReader reader(file, /*max_record_bytes=*/4096, /*max_array_bytes=*/16384);
      std::string record;
      int64_t line = 0;
      while (reader.next(record, line)) fuzz::parse_one(record, options);
    });
  } else {
    fuzz::parse_one(input.payload, options);
  }
  return 0;
}
