// train::same_fingerprint: a checkpoint resumes when its fingerprint equals the run's, also when a data source is
// the same file named relative to the working directory (checkpoints written before config.yaml named generated data
// by absolute path); anything else that differs refuses it.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "train/fingerprint.h"

namespace ft::test {
namespace {

namespace fs = std::filesystem;

std::string print(const std::string& path, int64_t seq_len = 32) {
  return nlohmann::json{{"data", {seq_len, false}}, {"data_sources", {{path, "prompt_completion", 1.0}}}}.dump();
}

TEST(Fingerprint, TheSameDataFileNamedRelativeOrAbsoluteMatchesAndOtherDifferencesDoNot) {
  TempDir dir("ft-fingerprint");
  write_file(dir / "a.jsonl", "{}\n");
  write_file(dir / "b.jsonl", "{}\n");
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path());
  const std::string absolute_a = (fs::absolute("a.jsonl")).string();
  EXPECT_TRUE(train::same_fingerprint(print(absolute_a), print(absolute_a)));
  EXPECT_TRUE(train::same_fingerprint(print("a.jsonl"), print(absolute_a)));
  EXPECT_FALSE(train::same_fingerprint(print("b.jsonl"), print(absolute_a)));
  EXPECT_FALSE(train::same_fingerprint(print("missing.jsonl"), print((dir / "missing.jsonl").string())));
  EXPECT_FALSE(train::same_fingerprint(print("a.jsonl", 64), print(absolute_a)));
  EXPECT_FALSE(train::same_fingerprint("not json", print(absolute_a)));
  fs::current_path(cwd);
}

}  // namespace
}  // namespace ft::test
