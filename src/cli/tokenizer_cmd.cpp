// `finetune tokenizer train --input FILE... --vocab-size N [--model-type bpe|unigram] --out DIR`: trains a
// sentencepiece model with the library's trainer.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "data/tokenizer.h"

namespace ft::cli {
namespace {

struct TrainOptions {
  std::vector<std::string> inputs;
  int64_t vocab_size = 0;
  std::string model_type = "bpe";
  std::string out;
  std::vector<std::string> symbols;
};

}  // namespace

void add_tokenizer(CLI::App& app, const Globals& /*globals*/, int& exit_code) {
  auto* tok = app.add_subcommand("tokenizer", "Train sentencepiece tokenizers");
  tok->require_subcommand(1);
  tok->footer("Example:\n  finetune tokenizer train --input data/train.jsonl --vocab-size 512 --out runs/tok");
  auto o = std::make_shared<TrainOptions>();
  auto* train = tok->add_subcommand("train", "Train a sentencepiece model (tokenizer.model + tokenizer.vocab in --out)");
  train->footer(
      "Example:\n  finetune tokenizer train --input data/train.jsonl --input notes.txt --vocab-size 512 "
      "--model-type bpe --out runs/tok\n"
      "JSON Lines inputs (.jsonl/.json) contribute their text/prompt/input/completion/content strings; other files "
      "one sentence per line. Ids: unk 0, bos 1, eos 2, pad 3.");
  train->add_option("--input,-i", o->inputs, "Input file (JSON Lines or plain text); repeatable")->required();
  train->add_option("--vocab-size", o->vocab_size, "Number of pieces")->required();
  train->add_option("--model-type", o->model_type, "bpe | unigram")->check(CLI::IsMember({"bpe", "unigram"}));
  train->add_option("--out,-o", o->out, "Output directory")->required();
  train->add_option("--user-symbols", o->symbols, "Pieces kept whole, e.g. '<|im_start|>' '<|im_end|>'");
  train->callback([o, &exit_code] {
    std::vector<std::filesystem::path> inputs(o->inputs.begin(), o->inputs.end());
    data::TokenizerTrainOptions options;
    options.user_defined_symbols = o->symbols;
    data::train_tokenizer(inputs, o->vocab_size, o->model_type, o->out, options);
    const auto model = std::filesystem::path(o->out) / "tokenizer.model";
    const auto tokenizer = data::Tokenizer::load(model);
    std::cout << "wrote " << model.string() << " (" << tokenizer->vocab_size() << " pieces)\n";
    exit_code = 0;
  });
}

}  // namespace ft::cli
