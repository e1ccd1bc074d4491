// The train suites' scratch directory: the shared TempDir (removed with ft::remove_tree, see util/fs.h).
#pragma once

#include "support/test_support.h"

namespace ft::test {

using ScratchDir = TempDir;

}  // namespace ft::test
