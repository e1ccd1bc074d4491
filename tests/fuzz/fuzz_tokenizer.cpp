// Tokenizer files as `finetune` finds them: the tokenizer itself (sentencepiece model, tokenizer.json, tiktoken,
// tekken; recognized by content) and the JSON files transformers reads beside it (tokenizer_config.json with its
// chat template, special_tokens_map.json, generation_config.json, config.json). Mode byte: 0 the payload is
// tokenizer.json, 1 tokenizer.model, 2-5 one of the side files next to a valid tokenizer.model. A tokenizer that
// loads then encodes and decodes a few texts (offsets checked to lie inside the text), and a chat template that is
// found is rendered and tokenized.
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "fuzz_data.h"

namespace ft::fuzz {
namespace {

const char* const kSideFiles[] = {"tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                                  "config.json"};

void exercise(const tok::Tokenizer& tok, std::string_view extra_text) {
  const std::string texts[] = {"Hello world", "Café 日本語 🙂 <|im_start|>user\nhi<|im_end|>", " two  spaces\n\t",
                               std::string(extra_text.substr(0, 256))};
  for (const auto& text : texts) {
    for (const bool split_special : {false, true}) {
      const auto enc = tok.encode_with_offsets(text, split_special);
      for (const auto& [begin, end] : enc.offsets) {
        if (begin > end || end > text.size()) __builtin_trap();  // offsets are byte ranges of `text`
      }
      tok.decode(enc.ids, /*skip_special=*/false);
      tok.decode(tok.encode(text, split_special));
    }
  }
}

}  // namespace

void target_setup() {
  small_tokenizer_model();
}

std::vector<std::string> seeds() {
  std::vector<std::string> out;
  const std::string spm = read_bytes(small_tokenizer_model());
  out.push_back(with_mode(1, spm));
  out.push_back(with_mode(0, R"({"version": "1.0", "added_tokens": [{"id": 5, "content": "<s>", "single_word": false,
    "lstrip": false, "rstrip": false, "normalized": false, "special": true}], "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
      {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [5],
      "tokens": ["<s>"]}}},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
      "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
      "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "\u0120ab": 4}, "merges": ["a b", ["\u0120", "ab"]]}})"));
  out.push_back(with_mode(0, R"({"version": "1.0", "added_tokens": [], "normalizer": {"type": "Sequence",
    "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "},
    "content": "\u2581"}]}, "pre_tokenizer": null, "post_processor": null, "decoder": {"type": "Sequence",
    "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
      "vocab": {"<unk>": 0, "<0x41>": 1, "\u2581": 2, "h": 3, "i": 4, "hi": 5, "\u2581hi": 6},
      "merges": ["h i", "\u2581 hi"]}})"));
  out.push_back(with_mode(1, "IQ== 0\nIg== 1\nIyQ= 2\nYWI= 3\nYQ== 4\nYg== 5\n"));  // tiktoken: base64 rank
  out.push_back(
      with_mode(0, R"({"config": {"pattern": "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+|\\s+",
    "num_vocab_tokens": 8, "default_vocab_size": 8, "default_num_special_tokens": 3, "version": "v7"},
    "vocab": [{"rank": 0, "token_bytes": "YQ==", "token_str": "a"}, {"rank": 1, "token_bytes": "Yg==",
    "token_str": "b"}, {"rank": 2, "token_bytes": "YWI=", "token_str": "ab"}],
    "special_tokens": [{"rank": 0, "token_str": "<unk>", "is_control": true}, {"rank": 1, "token_str": "<s>",
    "is_control": true}, {"rank": 2, "token_str": "</s>", "is_control": true}]})"));
  out.push_back(with_mode(2, R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}, "pad_token": null,
    "added_tokens_decoder": {"200": {"content": "<tool>", "special": true}},
    "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"})"));
  out.push_back(with_mode(3, R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
    "additional_special_tokens": ["<|im_start|>"]})"));
  out.push_back(with_mode(4, R"({"bos_token_id": 1, "eos_token_id": [2, 3], "pad_token_id": 0})"));
  out.push_back(with_mode(5, R"({"model_type": "llama", "bos_token_id": 1, "eos_token_id": 2, "vocab_size": 200})"));
  return out;
}

}  // namespace ft::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  using namespace ft;
  const auto input = fuzz::split_mode(data, size);
  const uint8_t mode = input.mode % 6;
  const fs::path dir = fuzz::scratch() / "tok";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::path file;
  if (mode < 2) {
    file = dir / (mode == 0 ? "tokenizer.json" : "tokenizer.model");
    fuzz::write_bytes(file, input.payload);
  } else {
    file = dir / "tokenizer.model";
    fs::copy_file(fuzz::small_tokenizer_model(), file);
    fuzz::write_bytes(dir / fuzz::kSideFiles[mode - 2], input.payload);
  }
  fuzz::accepted([&] {
    const auto tok = tok::Tokenizer::load(file);
    fuzz::exercise(*tok, input.payload);
    if (mode == 2) {
      if (const auto source = chat::find_chat_template(dir)) {
        const chat::JinjaChat chat(*source, *tok);
        const jinja::Value messages =
            jinja::Value::array({{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Hello"}}});
        chat.tokenize(chat.render(messages, /*add_generation_prompt=*/false, /*last_only=*/false));
      }
    }
  });
  return 0;
}
