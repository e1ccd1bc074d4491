// FileWriter: the bytes and digest of buffered and direct (O_DIRECT) files, whatever the pieces' sizes and however
// the file's end falls against the 4096-byte blocks; no partial file after a failure.
#include <gtest/gtest.h>

#include <string>

#include "support/scratch_dir.h"
#include "support/test_support.h"
#include "util/checksum.h"
#include "util/error.h"
#include "util/file_writer.h"

namespace ft::test {
namespace {

// `size` bytes that differ from block to block.
std::string pattern(size_t size) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>((i * 2654435761U) >> 13);
  return s;
}

TEST(FileWriter, DirectAndBufferedFilesHoldEveryByteAndTheirDigest) {
  ScratchDir dir;
  // Below one block, one buffer plus a ragged tail, and several buffers ending on a block boundary.
  for (const size_t size : {size_t{100}, (size_t{32} << 20) + 12345, size_t{70} << 20}) {
    const std::string bytes = pattern(size);
    for (const bool direct : {false, true}) {
      const auto path = dir.path() / ("f" + std::to_string(size) + (direct ? "d" : "b"));
      FileWriter out(path, direct);
      // Uneven pieces, so the buffer fills across calls.
      for (size_t at = 0; at < size;) {
        const size_t n = std::min<size_t>(size - at, 7 * 1048573);
        out.write(bytes.data() + at, n);
        at += n;
      }
      const FileDigest digest = out.finish(/*sync=*/true);
      uint64_t on_disk_size = 0;
      EXPECT_EQ(digest.sha256, sha256_file(path, &on_disk_size)) << path;
      EXPECT_EQ(digest.size, size);
      EXPECT_EQ(on_disk_size, size);
      EXPECT_TRUE(read_file(path) == bytes) << path;
    }
  }
}

TEST(FileWriter, AnUnfinishedFileIsRemoved) {
  ScratchDir dir;
  const auto path = dir.path() / "partial";
  {
    FileWriter out(path, /*direct=*/true);
    out.write(pattern(40 << 20));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace ft::test
