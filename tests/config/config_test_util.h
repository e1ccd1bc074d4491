// Helpers for the config tests: a temp directory with a minimal valid config and its data file.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/loader.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ft::test {

using ScratchDir = TempDir;

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
