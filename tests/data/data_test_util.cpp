#include "data_test_util.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "data/tokenizer_train.h"
#include "support/test_support.h"

namespace ft::test {

const std::filesystem::path& test_tokenizer_model() {
  static TempDir dir("ft-data-tok");
  static const std::filesystem::path model = [] {
    std::string corpus;
    const char* lines[] = {
        "The quick brown fox jumps over the lazy dog.",
        "Add: 472 + 95\nAnswer: 567",
        "Café crème brûlée, naïve façade, jalapeño, Ångström.",
        "日本語のテキストと中文文本，还有한국어 문장。",
        "Emoji: 🙂🚀🔥 and  multiple   spaces\tand tabs.",
        "def f(x):\n    return x * 2",
        "User: hello there! Assistant: hi, how can I help?",
    };
    for (int rep = 0; rep < 20; ++rep) {
      for (const char* l : lines) corpus += std::string(l) + " " + std::to_string(rep) + "\n";
    }
    write_file(dir / "corpus.txt", corpus);
    data::TokenizerTrainOptions options;
    options.user_defined_symbols = {"<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|end_header_id|>",
                                    "<|eot_id|>"};
    data::train_tokenizer({dir / "corpus.txt"}, 400, "bpe", dir / "tok", options);
    return dir / "tok" / "tokenizer.model";
  }();
  return model;
}

std::unique_ptr<tok::Tokenizer> load_test_tokenizer() {
  return tok::Tokenizer::load(test_tokenizer_model());
}

nlohmann::json run_python(const std::string& script, const nlohmann::json& input) {
  TempDir dir("ft-data-py");
  write_file(dir / "in.json", input.dump());
  write_file(dir / "script.py", script);
  // The subshell keeps Python's warnings on stderr out of the JSON that run() captures.
  const auto r = run("(" + shell_quote(python()) + " " + shell_quote((dir / "script.py").string()) + " " +
                     shell_quote((dir / "in.json").string()) + " 2>/dev/null)");
  if (r.exit_code != 0) throw std::runtime_error("python failed (" + std::to_string(r.exit_code) + "): " + r.output);
  return nlohmann::json::parse(r.output);
}

}  // namespace ft::test
