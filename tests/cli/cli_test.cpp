// The executable's contract: info output, version, exit codes for usage errors, the help a misspelled command or a
// config key given as an option gets, and the chart formats of `finetune plot`.
#include <torch/cuda.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>

#include "metrics/plot.h"
#include "support/test_support.h"
#include "util/fs.h"

namespace ft::test {
namespace {

TEST(Cli, InfoReportsLibraryVersions) {
  const auto result = run_finetune("info --json");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto info = nlohmann::json::parse(result.output);
  EXPECT_EQ(info["libtorch"].get<std::string>().substr(0, 2), "2.");
  EXPECT_TRUE(info.contains("cuda_runtime"));
  EXPECT_TRUE(info.contains("nccl"));
  EXPECT_TRUE(info["gpus"].is_array());
  EXPECT_EQ(info["gpus"].size(), static_cast<size_t>(torch::cuda::device_count()));
}

TEST(Cli, InfoTextNamesEveryComponent) {
  const auto result = run_finetune("info");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  for (const char* word : {"finetune", "LibTorch", "CUDA runtime", "cuDNN", "NCCL", "GPU"}) {
    EXPECT_NE(result.output.find(word), std::string::npos) << word;
  }
}

TEST(Cli, VersionFlagPrintsVersion) {
  const auto result = run_finetune("--version");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.output.find("finetune 0."), std::string::npos) << result.output;
}

TEST(Cli, MissingSubcommandIsUsageError) {
  EXPECT_EQ(run_finetune("").exit_code, 2);
  EXPECT_EQ(run_finetune("no-such-command").exit_code, 2);
}

// Exit code 2 and the error line, with `message` in it.
void expect_usage_error(const std::string& args, const std::string& message) {
  SCOPED_TRACE(args);
  const auto r = run_finetune(args);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const size_t line = r.output.find("finetune: error: ");
  ASSERT_NE(line, std::string::npos) << r.output;
  EXPECT_NE(r.output.substr(line, r.output.find('\n', line) - line).find(message), std::string::npos) << r.output;
}

TEST(Cli, AMisspelledCommandGetsTheNearestOneAtEveryLevel) {
  expect_usage_error("trian --config x.yaml", "unknown command 'trian'; did you mean 'train'?");
  expect_usage_error("--log-level info trian", "unknown command 'trian'; did you mean 'train'?");
  expect_usage_error("config shwo --config x.yaml", "unknown command 'config shwo'; did you mean 'config show'?");
  expect_usage_error("data inpsect --config x.yaml", "unknown command 'data inpsect'; did you mean 'data inspect'?");
  expect_usage_error("tokenizer trian", "unknown command 'tokenizer trian'; did you mean 'tokenizer train'?");
  expect_usage_error("xyzzy", "unknown command 'xyzzy' (the commands of finetune are info, config, train,");
  expect_usage_error("config", "finetune config needs a command: show or validate");
  expect_usage_error("",
                     "finetune needs a command: info, config, train, generate, export, tokenizer, data, plot or "
                     "sweep");
  EXPECT_NE(run_finetune("trian").output.find("hint: `finetune --help` describes the commands"), std::string::npos);
}

// What CLI11 refuses without a better explanation still comes as the error line, named after the command, with the
// hint to its --help; `finetune --help train` is train's help, not a missing config.
TEST(Cli, OtherUsageErrorsNameTheCommandAndItsHelp) {
  expect_usage_error("train --config", "finetune train: --config: 1 required TEXT missing");
  expect_usage_error("generate", "finetune generate: --model is required");
  expect_usage_error("info extra", "finetune info: The following argument was not expected: extra");
  EXPECT_NE(run_finetune("generate").output.find("finetune: hint: `finetune generate --help` lists its arguments"),
            std::string::npos);
  const auto help = run_finetune("--help train");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("finetune train [OPTIONS]"), std::string::npos) << help.output;
}

TEST(Cli, AConfigKeyGivenAsAnOptionIsPointedToItsOverride) {
  TempDir dir("ft-cli-keys");
  const std::string config = shell_quote((source_dir() / "configs" / "demo.yaml").string());
  const std::string out = shell_quote((dir / "run").string());
  // Found among the config's keys: by the last part of the key, the whole key, or a near miss of either.
  expect_usage_error("train --config " + config + " --max-steps 5 run.output_dir=" + out,
                     "unknown option '--max-steps' for finetune train; config settings are key=value overrides: "
                     "train.max_steps=5");
  expect_usage_error("train --config " + config + " --lr=1e-4",
                     "unknown option '--lr' for finetune train; config settings are key=value overrides: "
                     "optimizer.lr=1e-4");
  expect_usage_error("config show --config " + config + " --optimizer.weight-decay 0.1",
                     "config settings are key=value overrides: optimizer.weight_decay=0.1");
  expect_usage_error("data inspect --config " + config + " --max-step 5", "overrides: train.max_steps=5");
  expect_usage_error("config validate --config " + config + " --micro-batch-size",
                     "overrides: train.micro_batch_size=VALUE");
  const auto hint = run_finetune("train --config " + config + " --max-steps 5");
  EXPECT_NE(hint.output.find("hint: e.g. finetune train --config FILE train.max_steps=5"), std::string::npos)
      << hint.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "run")) << "nothing ran";
  // Commands without overrides: a near miss of their own options.
  expect_usage_error("generate --model m --max-new-token 5",
                     "unknown option '--max-new-token' for finetune generate; did you mean --max-new-tokens?");
  expect_usage_error("plot runs/x --outt x.png", "unknown option '--outt' for finetune plot");
}

// As axolotl and llamafactory-cli take it: the config file as the first argument, the overrides after it; and a
// command without any config file says how to give one.
TEST(Cli, TheConfigFileMayComeAsTheFirstArgument) {
  const std::string config = shell_quote((source_dir() / "configs" / "demo.yaml").string());
  const auto positional = run_finetune("config show " + config + " train.max_steps=7 optimizer.lr=0.0123");
  ASSERT_EQ(positional.exit_code, 0) << positional.output;
  const auto option = run_finetune("config show --config " + config + " train.max_steps=7 optimizer.lr=0.0123");
  ASSERT_EQ(option.exit_code, 0) << option.output;
  EXPECT_EQ(positional.output, option.output);
  EXPECT_NE(positional.output.find("max_steps: 7"), std::string::npos) << positional.output;
  EXPECT_EQ(run_finetune("config validate " + config).exit_code, 0);
  expect_usage_error("train", "finetune train needs a config file");
  expect_usage_error("config validate train.max_steps=5", "finetune config validate needs a config file");
  expect_usage_error("data inspect --n 2", "finetune data inspect needs a config file");
  expect_usage_error("config validate no-such-config.yaml", "config file 'no-such-config.yaml' not found");
  EXPECT_NE(run_finetune("train").output.find("hint: give it as --config FILE or as the first argument"),
            std::string::npos);
}

TEST(Cli, SweepTakesItsBaseConfigAndSweepFileAsTheFirstArguments) {
  const std::string config = shell_quote((source_dir() / "configs" / "demo.yaml").string());
  const std::string sweep = shell_quote((source_dir() / "configs" / "demo-sweep.yaml").string());
  const auto options = run_finetune("sweep --config " + config + " --sweep " + sweep + " --list train.max_steps=70");
  ASSERT_EQ(options.exit_code, 0) << options.output;
  for (const std::string& args :
       {config + " " + sweep, config + " --sweep " + sweep, "--config " + config + " " + sweep}) {
    const auto positional = run_finetune("sweep " + args + " --list train.max_steps=70");
    ASSERT_EQ(positional.exit_code, 0) << args << "\n" << positional.output;
    EXPECT_EQ(positional.output, options.output) << args;
  }
  expect_usage_error("sweep " + config + " train.max_steps=70", "finetune sweep needs a base config and a sweep file");
  expect_usage_error("sweep no-such-base.yaml " + sweep + " --list", "no-such-base.yaml");
}

TEST(Cli, PlotWritesTheFormatItsExtensionNamesAndRefusesOthers) {
  TempDir run("ft-cli-plot");
  write_file(run / "metrics.jsonl",
             "{\"event\":\"train\",\"step\":1,\"loss\":5.0,\"lr\":0.001,\"tokens_per_s\":900}\n"
             "{\"event\":\"train\",\"step\":2,\"loss\":0.2,\"lr\":0.001,\"tokens_per_s\":1000}\n"
             "{\"event\":\"eval\",\"step\":2,\"loss\":0.3}\n");
  const std::string dir = shell_quote(run.path().string());
  for (const char* name : {"x.jpg", "x", "x.PNG.txt"}) {
    expect_usage_error("plot " + dir + " --out " + shell_quote((run / name).string()),
                       "plot '" + (run / name).string() + "': ");
    EXPECT_FALSE(std::filesystem::exists(run / name)) << name;
  }
  const auto jpg = run_finetune("plot " + dir + " --out " + shell_quote((run / "x.jpg").string()));
  EXPECT_NE(jpg.output.find("(expected .png, .svg or .pdf)"), std::string::npos) << jpg.output;
  if (!metrics::plotting_available()) GTEST_SKIP() << "built without cairo (FT_WITH_CAIRO=OFF)";
  const auto pdf = run_finetune("plot " + dir + " --out " + shell_quote((run / "report.pdf").string()));
  ASSERT_EQ(pdf.exit_code, 0) << pdf.output;
  const std::string bytes = read_file(run / "report.pdf");
  EXPECT_EQ(bytes.rfind("%PDF-", 0), 0u) << bytes.substr(0, 16);
  EXPECT_NE(bytes.find("/MediaBox [ 0 0 720 720 ]"), std::string::npos);
}

TEST(Cli, EverySubcommandHasHelpWithExample) {
  for (const char* sub : {"info", "train", "config show", "config validate", "generate", "export", "tokenizer train",
                          "data synth", "data inspect", "plot", "sweep"}) {
    const auto result = run_finetune(std::string(sub) + " --help");
    EXPECT_EQ(result.exit_code, 0) << sub;
    EXPECT_NE(result.output.find("Example"), std::string::npos) << sub << ": " << result.output;
  }
}

}  // namespace
}  // namespace ft::test

namespace ft::test {
namespace {

// libtorch.so exports its own std::filesystem::remove_all, which crashes when it binds first; the project removes
// trees with ft::remove_tree instead (util/fs.h).
TEST(Build, RemoveTreeRemovesNestedDirectoriesAndIgnoresMissingOnes) {
  const auto root = std::filesystem::temp_directory_path() / ("ft-fs-" + std::to_string(::getpid()));
  std::filesystem::create_directories(root / "a" / "b");
  write_file(root / "a" / "b" / "file.txt", "x");
  write_file(root / "top.txt", "y");
  std::filesystem::create_symlink("/etc", root / "link");
  remove_tree(root);
  EXPECT_FALSE(std::filesystem::exists(root));
  EXPECT_TRUE(std::filesystem::exists("/etc/passwd"));
  EXPECT_NO_THROW(remove_tree(root));
}

}  // namespace
}  // namespace ft::test
