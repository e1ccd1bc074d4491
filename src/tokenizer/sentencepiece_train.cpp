#include "tokenizer/sentencepiece_train.h"

#include <sentencepiece_trainer.h>

#include <unordered_map>

#include "util/error.h"
#include "util/file_writer.h"

namespace ft::tok {
namespace {

class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>& s) : s_(s) {}
  bool done() const override { return i_ >= s_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return s_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& s_;
  size_t i_ = 0;
};

}  // namespace

void train_sentencepiece(const std::vector<std::string>& sentences, int64_t vocab_size, TokenizerModel model_type,
                         const std::filesystem::path& out_dir, const SentencepieceTrainOptions& options) {
  std::filesystem::create_directories(out_dir);
  std::string symbols;
  for (const auto& s : options.user_defined_symbols) symbols += (symbols.empty() ? "" : ",") + s;
  std::unordered_map<std::string, std::string> args = {
      {"model_prefix", (out_dir / "tokenizer").string()},
      {"vocab_size", std::to_string(vocab_size)},
      {"model_type", name_of(model_type)},
      {"character_coverage", std::to_string(options.character_coverage)},
      {"byte_fallback", "true"},
      {"split_digits", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"hard_vocab_limit", "false"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "3"},
      {"num_threads", "1"},
      {"shuffle_input_sentence", "false"},
      {"input_sentence_size", "0"},
      {"minloglevel", "1"},  // warnings and errors only: the INFO log is hundreds of lines
  };
  if (!symbols.empty()) args["user_defined_symbols"] = symbols;
  if (!options.write_vocab) args.erase("model_prefix");  // sentencepiece takes a file prefix or an in-memory model
  VectorIterator it(sentences);
  // Without the .vocab text file, the model comes back in memory: sentencepiece then writes nothing itself, and does
  // not warn that a piece such as "\n" breaks that file's format.
  std::string model_proto;
  const auto status =
      sentencepiece::SentencePieceTrainer::Train(args, &it, options.write_vocab ? nullptr : &model_proto);
  if (!status.ok()) {
    throw Error("sentencepiece training failed: " + status.ToString(),
                "byte fallback needs at least 260 pieces plus one per distinct character; a small corpus needs a "
                "smaller vocabulary for unigram (or use bpe)");
  }
  if (!options.write_vocab) ft::write_file_atomic(out_dir / "tokenizer.model", model_proto);
}

}  // namespace ft::tok
