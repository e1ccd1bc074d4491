// The executable's contract: info output, version, exit codes for usage errors.
#include <torch/cuda.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>

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
