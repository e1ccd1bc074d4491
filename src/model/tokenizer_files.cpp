#include "model/tokenizer_files.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "chat/templates.h"
#include "io/safe_path.h"
#include "util/file_writer.h"
#include "util/fs.h"

namespace ft::model {
namespace {

// The tokens of tokenizer.add_tokens, as transformers' save_pretrained records special tokens it added:
// added_tokens_decoder entries (how a sentencepiece tokenizer keeps them) and the list of extra special tokens
// (transformers 5's extra_special_tokens where the config has that list, else additional_special_tokens, which
// every version reads); the same list in special_tokens_map.json when the directory has one.
void record_added_tokens(const tok::Tokenizer& tokenizer, nlohmann::json& tokenizer_config,
                         const std::filesystem::path& dir) {
  const auto& added = tokenizer.added_tokens();
  if (added.empty()) return;
  nlohmann::json& decoder = tokenizer_config["added_tokens_decoder"];
  if (!decoder.is_object()) decoder = nlohmann::json::object();
  for (const auto& t : added) {
    decoder[std::to_string(t.id)] = {{"content", t.content}, {"lstrip", false},      {"normalized", false},
                                     {"rstrip", false},      {"single_word", false}, {"special", true}};
  }
  auto extend = [&](nlohmann::json& config) {
    const bool v5_list = config.contains("extra_special_tokens") && config["extra_special_tokens"].is_array();
    nlohmann::json& list = config[v5_list ? "extra_special_tokens" : "additional_special_tokens"];
    if (!list.is_array()) list = nlohmann::json::array();
    for (const auto& t : added) {
      const bool listed = std::any_of(list.begin(), list.end(), [&](const nlohmann::json& v) {
        return (v.is_string() && v == t.content) ||
               (v.is_object() && v.contains("content") && v["content"] == t.content);
      });
      if (!listed) list.push_back(t.content);
    }
  };
  extend(tokenizer_config);
  // transformers' LlamaTokenizer encodes the text after a special token with the word marker only in legacy mode,
  // which is how sentencepiece encodes each stretch between added tokens here.
  if (tokenizer.kind() == "sentencepiece" && !tokenizer_config.contains("legacy")) tokenizer_config["legacy"] = true;
  const auto map_file = dir / "special_tokens_map.json";
  if (std::filesystem::exists(map_file)) {
    auto map = nlohmann::json::parse(read_text_file(map_file));
    if (map.is_object()) {
      extend(map);
      ft::write_file(map_file, map.dump(2));
    }
  }
}

}  // namespace

std::vector<std::string> copy_tokenizer_files(const std::filesystem::path& from, const std::filesystem::path& to) {
  static const char* kNames[] = {"tokenizer.model", "tokenizer.json", "tokenizer_config.json",
                                 "special_tokens_map.json", "generation_config.json", "added_tokens.json", "vocab.json",
                                 "merges.txt", "chat_template.jinja", "tekken.json",
                                 // a multimodal checkpoint's processor (Gemma 3 4B+), kept usable for images
                                 "chat_template.json", "preprocessor_config.json", "processor_config.json"};
  std::vector<std::string> present;
  for (const char* name : kNames) {
    if (!std::filesystem::exists(from / name)) continue;
    // Checked before anything is copied, e.g. tokenizer.json -> ~/.ssh/id_rsa in a downloaded model.
    io::require_inside_model_dir(from / name, from, "; no tokenizer file was copied");
    present.emplace_back(name);
  }
  std::filesystem::create_directories(to);
  for (const auto& name : present) {
    std::filesystem::copy_file(from / name, to / name, std::filesystem::copy_options::overwrite_existing);
  }
  return present;
}

void write_tokenizer_files(const std::string& base_model_dir, const tok::Tokenizer& tokenizer,
                           const std::string& template_name, bool add_bos, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  nlohmann::json tokenizer_config = nlohmann::json::object();
  if (!base_model_dir.empty()) {
    copy_tokenizer_files(base_model_dir, dir);
    if (fs::exists(dir / "tokenizer_config.json")) {
      tokenizer_config = nlohmann::json::parse(read_text_file(dir / "tokenizer_config.json"));
    }
  }
  // The file the run tokenized with, under its own name (tokenizer.model, tokenizer.json or tekken.json).
  if (fs::exists(tokenizer.model_file())) tokenizer.save(dir);
  if (!tokenizer_config.contains("tokenizer_class")) {
    tokenizer_config["tokenizer_class"] =
        tokenizer.kind() == "sentencepiece" ? "LlamaTokenizer" : "PreTrainedTokenizerFast";
  }
  auto piece = [&](int64_t id) { return id >= 0 ? tokenizer.id_to_piece(id) : std::string(); };
  if (!tokenizer_config.contains("bos_token")) tokenizer_config["bos_token"] = piece(tokenizer.bos_id());
  if (!tokenizer_config.contains("eos_token")) tokenizer_config["eos_token"] = piece(tokenizer.eos_id());
  if (!tokenizer_config.contains("add_bos_token")) tokenizer_config["add_bos_token"] = add_bos;
  if (!tokenizer_config.contains("add_eos_token")) tokenizer_config["add_eos_token"] = false;
  // `mistral` resolves to the variant of this tokenizer (v1, v3 or tekken), as training did.
  const std::string chat_template = chat::chat_template_jinja(chat::resolve_template(template_name, tokenizer));
  if (!chat_template.empty()) tokenizer_config["chat_template"] = chat_template;
  record_added_tokens(tokenizer, tokenizer_config, dir);
  ft::write_file(dir / "tokenizer_config.json", tokenizer_config.dump(2));
}

}  // namespace ft::model
