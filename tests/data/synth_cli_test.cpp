// Synthetic tasks (answers checked by independent arithmetic) and the data/tokenizer subcommands end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "data/synth.h"
#include "data_test_util.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

std::vector<long> numbers(const std::string& s) {
  std::vector<long> v;
  std::istringstream in(s);
  std::string w;
  while (in >> w) {
    if (!w.empty() && std::isdigit(static_cast<unsigned char>(w[0]))) v.push_back(std::stol(w));
  }
  return v;
}

TEST(Synth, AnswersAreCorrectAndGenerationIsDeterministic) {
  for (const auto& s : data::synth_generate("add", 200, 3)) {
    const auto v = numbers(s.prompt);
    ASSERT_EQ(v.size(), 2u) << s.prompt;
    EXPECT_EQ(std::stol(s.completion), v[0] + v[1]);
  }
  for (const auto& s : data::synth_generate("sort", 50, 3)) {
    auto v = numbers(s.prompt);
    std::sort(v.begin(), v.end());
    EXPECT_EQ(numbers(s.completion), v);
  }
  for (const auto& s : data::synth_generate("reverse", 50, 3)) {
    auto v = numbers(s.prompt);
    std::reverse(v.begin(), v.end());
    EXPECT_EQ(numbers(s.completion), v);
  }
  const auto a = data::synth_generate("add", 20, 5), b = data::synth_generate("add", 20, 5),
             c = data::synth_generate("add", 20, 6);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].prompt, b[i].prompt);
  EXPECT_NE(a[0].prompt + a[1].prompt, c[0].prompt + c[1].prompt);
  EXPECT_THROW(data::synth_generate("nope", 1, 0), ConfigError);
  EXPECT_TRUE(data::exact_match("  567\n", " 567"));
  EXPECT_FALSE(data::exact_match("5670", "567"));
}

TEST(DataCli, SynthWritesPromptCompletionJsonLines) {
  TempDir dir("ft-synth");
  const auto r = run_finetune("data synth --task reverse --n 5 --seed 2 --out " + shell_quote((dir / "r.jsonl").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream in(read_file(dir / "r.jsonl"));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["prompt"].get<std::string>(), data::synth_generate("reverse", 5, 2)[static_cast<size_t>(n)].prompt);
    ++n;
  }
  EXPECT_EQ(n, 5);
  EXPECT_EQ(run_finetune("data synth --task nope --n 1 --out x.jsonl").exit_code, 2);

  // An existing output is kept unless --overwrite is given.
  const std::string before = read_file(dir / "r.jsonl");
  const auto again = run_finetune("data synth --task add --n 3 --out " + shell_quote((dir / "r.jsonl").string()));
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_NE(again.output.find("exists already"), std::string::npos) << again.output;
  EXPECT_EQ(read_file(dir / "r.jsonl"), before);
  const auto replaced =
      run_finetune("data synth --task add --n 3 --overwrite --out " + shell_quote((dir / "r.jsonl").string()));
  EXPECT_EQ(replaced.exit_code, 0) << replaced.output;
  EXPECT_NE(read_file(dir / "r.jsonl"), before);
}

TEST(DataCli, TokenizerTrainAndInspectShowStatsAndLossMarks) {
  TempDir dir("ft-inspect");
  ASSERT_EQ(run_finetune("data synth --task add --n 40 --seed 1 --out " + shell_quote((dir / "add.jsonl").string()))
                .exit_code,
            0);
  auto r = run_finetune("tokenizer train --input " + shell_quote((dir / "add.jsonl").string()) +
                        " --vocab-size 300 --out " + shell_quote((dir / "tok").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto again = run_finetune("tokenizer train --input " + shell_quote((dir / "add.jsonl").string()) +
                                  " --vocab-size 280 --out " + shell_quote((dir / "tok").string()));
  EXPECT_EQ(again.exit_code, 2) << "an existing tokenizer.model is kept without --overwrite:\n" << again.output;
  write_file(dir / "cfg.yaml", "run:\n  output_dir: " + (dir / "run").string() + "\ntokenizer:\n  path: " +
                                   (dir / "tok" / "tokenizer.model").string() + "\ndata:\n  seq_len: 64\n  cache_dir: " +
                                   (dir / "cache").string() + "\n  train:\n    - path: " + (dir / "add.jsonl").string() +
                                   "\n      format: prompt_completion\n");
  r = run_finetune("data inspect --config " + shell_quote((dir / "cfg.yaml").string()) + " --n 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("40 samples"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("packing:"), std::string::npos) << r.output;
  const auto first = data::synth_generate("add", 1, 1)[0];
  // The completion and EOS are the loss tokens: "[[ 123</s>#2]]" (a special token shows its id).
  EXPECT_NE(r.output.find("[[" + first.completion + "</s>#2]]"), std::string::npos) << r.output;
  // `tokenizer encode` gives Python sentencepiece's ids; `decode` gives the text back.
  const std::string text = "Add: 12 + 7\nAnswer: 19";
  r = run_finetune("tokenizer encode --tokenizer " + shell_quote((dir / "tok").string()) + " --json --text " +
                   shell_quote(text));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto encoded = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(encoded["kind"], "sentencepiece");
  const auto ref = run_python(
      "import json, sys, sentencepiece as spm\n"
      "a = json.load(open(sys.argv[1]))\n"
      "print(json.dumps(spm.SentencePieceProcessor(model_file=a['model']).encode(a['text'])))\n",
      {{"model", (dir / "tok" / "tokenizer.model").string()}, {"text", text}});
  EXPECT_EQ(encoded["ids"], ref);
  std::string ids;
  for (const auto& id : ref) ids += (ids.empty() ? "" : " ") + std::to_string(id.get<int64_t>());
  r = run_finetune("tokenizer decode --tokenizer " + shell_quote((dir / "tok" / "tokenizer.model").string()) +
                   " --ids " + shell_quote(ids));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(text), std::string::npos) << r.output;
  // A training that fails leaves no --out directory it made.
  r = run_finetune("tokenizer train --input " + shell_quote((dir / "tok" / "tokenizer.vocab").string()) +
                   " --vocab-size 100 --out " + shell_quote((dir / "too-small").string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "too-small")) << r.output;
  for (const char* bad : {"999", "-1"}) {  // outside the vocabulary: bad input, not an internal check
    r = run_finetune("tokenizer decode --tokenizer " + shell_quote((dir / "tok" / "tokenizer.model").string()) +
                     " --ids='1 " + bad + "'");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(std::string("--ids: token id ") + bad + " is outside"), std::string::npos) << r.output;
  }
  for (const char* sub : {"data inspect", "data synth", "tokenizer train", "tokenizer encode", "tokenizer decode"}) {
    const auto h = run_finetune(std::string(sub) + " --help");
    EXPECT_EQ(h.exit_code, 0);
    EXPECT_NE(h.output.find("Example"), std::string::npos) << sub;
  }
}

}  // namespace
}  // namespace ft::test
