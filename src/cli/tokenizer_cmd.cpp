// `finetune tokenizer train|encode|decode`: trains a sentencepiece model with the library's trainer, and shows the
// ids any supported tokenizer (sentencepiece, tokenizer.json, tiktoken, tekken) gives a text, or the text of ids.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "data/tokenizer_train.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/fmt.h"
#include "util/fs.h"
#include "util/log.h"

namespace ft::cli {
namespace {

struct CodecOptions {
  std::string tokenizer;  // file or model directory
  std::string text;       // encode: the text (stdin when empty)
  bool split_special = false;
  std::string ids;        // decode: "1 2 3"
  bool json = false;
};


void add_codec(CLI::App* tok, int& exit_code) {
  auto o = std::make_shared<CodecOptions>();
  auto* enc = tok->add_subcommand("encode", "Print the ids (and tokens) a tokenizer gives a text");
  enc->footer("Example:\n  finetune tokenizer encode --tokenizer /models/Meta-Llama-3-8B-Instruct --text 'Hello world'\n"
              "Without --text the text is read from standard input. No BOS/EOS is added.");
  enc->add_option("--tokenizer,-t", o->tokenizer, "Tokenizer file or model directory")->required();
  enc->add_option("--text", o->text, "Text to encode (default: standard input)");
  enc->add_flag("--split-special", o->split_special, "Keep special-token spellings in the text as plain text");
  enc->add_flag("--json", o->json, "One JSON object: file, kind, ids, tokens");
  enc->callback([o, &exit_code] {
    const auto tokenizer = tok::Tokenizer::load(o->tokenizer);
    std::string text = o->text;
    if (text.empty()) {
      std::ostringstream in;
      in << std::cin.rdbuf();
      text = in.str();
    }
    const auto ids = tokenizer->encode(text, o->split_special);
    std::vector<std::string> tokens;
    for (int64_t id : ids) tokens.push_back(tokenizer->id_to_piece(id));
    if (o->json) {
      std::cout << nlohmann::json{{"file", tokenizer->model_file().string()}, {"kind", tokenizer->kind()},
                                  {"ids", ids}, {"tokens", tokens}}.dump() << "\n";
    } else {
      for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
      std::cout << "\n";
    }
    exit_code = 0;
  });
  auto* dec = tok->add_subcommand("decode", "Print the text of token ids");
  dec->footer("Example:\n  finetune tokenizer decode --tokenizer /models/Meta-Llama-3-8B-Instruct --ids '9906 1917'");
  dec->add_option("--tokenizer,-t", o->tokenizer, "Tokenizer file or model directory")->required();
  dec->add_option("--ids", o->ids, "Token ids separated by spaces")->required();
  dec->callback([o, &exit_code] {
    const auto tokenizer = tok::Tokenizer::load(o->tokenizer);
    const std::vector<int64_t> ids = parse_ids(o->ids, "--ids");
    for (const int64_t id : ids) {
      if (id < 0 || id >= tokenizer->vocab_size()) {
        throw ConfigError(fmt::format("--ids: token id {} is outside the tokenizer's vocabulary [0, {})", id,
                                      tokenizer->vocab_size()),
                          "give ids that this tokenizer produced (finetune tokenizer encode prints them)");
      }
    }
    std::cout << tokenizer->decode(ids) << "\n";
    exit_code = 0;
  });
}

struct TrainOptions {
  std::vector<std::string> inputs;
  int64_t vocab_size = 0;
  std::string model_type = "bpe";
  std::string out;
  std::vector<std::string> symbols;
  bool overwrite = false;
};

}  // namespace

void add_tokenizer(CLI::App& app, const Globals& /*globals*/, int& exit_code) {
  auto* tok = app.add_subcommand("tokenizer", "Train sentencepiece tokenizers; encode and decode with any tokenizer");
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
  train->add_flag("--overwrite", o->overwrite, "Replace a tokenizer.model already in --out");
  train->callback([o, &exit_code] {
    refuse_existing_output(std::filesystem::path(o->out) / "tokenizer.model", o->overwrite, "--out");
    std::vector<std::filesystem::path> inputs(o->inputs.begin(), o->inputs.end());
    data::TokenizerTrainOptions options;
    options.user_defined_symbols = o->symbols;
    // A failed training leaves no directory behind that it made (an existing --out stays as it was).
    std::error_code ec;
    const bool out_existed = std::filesystem::exists(o->out, ec);
    try {
      data::train_tokenizer(inputs, o->vocab_size, o->model_type, o->out, options);
    } catch (...) {
      if (!out_existed) {
        try {
          remove_tree(o->out);
        } catch (const Error& e) {  // the training's own error is the one to report
          FT_LOG_WARN("cannot remove {}, made for the tokenizer: {}", o->out, e.what());
        }
      }
      throw;
    }
    const auto model = std::filesystem::path(o->out) / "tokenizer.model";
    const auto tokenizer = tok::Tokenizer::load(model);
    std::cout << "wrote " << model.string() << " (" << tokenizer->vocab_size() << " pieces)\n";
    exit_code = 0;
  });
  add_codec(tok, exit_code);
}

}  // namespace ft::cli
