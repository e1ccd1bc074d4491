// A TempDir whose contents are removed with train::remove_tree first: std::filesystem::remove_all (used by
// TempDir) binds to libtorch.so's exported copy in these executables and crashes on non-empty directories.
#pragma once

#include <gtest/gtest.h>

#include "support/test_support.h"
#include "train/checkpoint_store.h"
#include "util/error.h"

namespace ft::test {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix = "ft-train") : dir_(prefix) {}
  ~ScratchDir() {
    try {
      train::remove_tree(dir_.path());
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return dir_.path(); }
  std::filesystem::path operator/(const std::string& name) const { return dir_ / name; }

 private:
  TempDir dir_;  // destroyed after the body above emptied it: remove_all of a missing path is safe
};

}  // namespace ft::test
