// The source folders form layers: a file includes headers of its own folder and of folders below it, never above
// (docs/internals.md, "Layers"). A new folder gets a place in kLayers; an include upward fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace ft::test {
namespace {

namespace fs = std::filesystem;

// Bottom first.
const std::vector<std::string> kLayers = {"util",  "kernels", "config", "io",    "jinja", "tokenizer",
                                          "chat",  "quant",   "model",  "dist",  "ckpt",  "data",
                                          "optim", "metrics", "train",  "sweep", "cli"};

int layer_of(const std::string& folder) {
  const auto it = std::find(kLayers.begin(), kLayers.end(), folder);
  return it == kLayers.end() ? -1 : static_cast<int>(it - kLayers.begin());
}

TEST(Layering, NoSourceFileIncludesAHeaderOfAHigherFolder) {
  const fs::path src = source_dir() / "src";
  const std::regex include(R"re(#include "(\w+)/)re");
  int files = 0;
  for (const auto& entry : fs::directory_iterator(src)) {
    if (!entry.is_directory()) continue;
    const std::string folder = entry.path().filename().string();
    const int mine = layer_of(folder);
    EXPECT_GE(mine, 0) << "src/" << folder << " has no place in kLayers";
    for (const auto& file : fs::recursive_directory_iterator(entry.path())) {
      if (!file.is_regular_file()) continue;
      const std::string text = read_file(file.path());
      ++files;
      for (std::sregex_iterator m(text.begin(), text.end(), include), end; m != end; ++m) {
        const int theirs = layer_of((*m)[1].str());
        EXPECT_TRUE(theirs < 0 || theirs <= mine)
            << fs::relative(file.path(), src).string() << " includes " << (*m)[1].str() << "/, a higher folder";
      }
    }
  }
  EXPECT_GT(files, 100);
}

}  // namespace
}  // namespace ft::test
