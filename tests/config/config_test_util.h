// Helpers for the config tests: a temp directory with a minimal valid config and its data file.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ftw.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "config/loader.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ft::test {

// A fresh temp directory, removed with POSIX calls. Not TempDir: libtorch.so exports its own
// std::filesystem::remove_all, which the dynamic linker binds for the whole process, and it segfaults (torch 2.11).
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) {
    std::string templ = (std::filesystem::path(P_tmpdir) / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
    path_ = templ;
  }
  ~ScratchDir() {
    ::nftw(path_.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
           FTW_DEPTH | FTW_PHYS);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// A config that passes validation: one existing text source, a tokenizer trained at start.
inline const char* kMinimalConfig =
    "tokenizer:\n"
    "  train_vocab_size: 64\n"
    "data:\n"
    "  train:\n"
    "    - path: train.jsonl\n"
    "      format: text\n";

class ConfigDir : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir_ / "train.jsonl", "{\"text\": \"hello\"}\n"); }

  // Writes `text` to dir/name and returns the path.
  std::filesystem::path put(const std::string& name, const std::string& text) {
    write_file(dir_ / name, text);
    return dir_ / name;
  }

  config::LoadedConfig load(const std::string& text, const std::vector<std::string>& overrides = {}) {
    return config::load_config(put("config.yaml", text), overrides);
  }

  // The ConfigError message of loading `text`; fails the test when it loads.
  std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
    return error_of_file(put("config.yaml", text), overrides);
  }

  std::string error_of_file(const std::filesystem::path& file, const std::vector<std::string>& overrides = {}) {
    try {
      config::load_config(file, overrides);
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      return e.what();
    }
    ADD_FAILURE() << "expected a ConfigError for " << file;
    return {};
  }

  ScratchDir dir_{"ft-config"};
};

}  // namespace ft::test
