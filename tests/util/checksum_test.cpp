// Checksums against published test vectors.
#include <gtest/gtest.h>

#include <string>

#include "support/scratch_dir.h"
#include "support/test_support.h"
#include "util/checksum.h"
#include "util/error.h"

namespace ft::test {
namespace {

std::string sha(const std::string& s) {
  Sha256 h;
  h.update(s);
  return h.hex_digest();
}

TEST(Checksum, Sha256MatchesFipsVectors) {
  EXPECT_EQ(sha(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a', fed in uneven pieces.
  Sha256 h;
  const std::string chunk(997, 'a');
  size_t left = 1000000;
  while (left > 0) {
    const size_t n = std::min(left, chunk.size());
    h.update(chunk.data(), n);
    left -= n;
  }
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Checksum, Sha256OfFileMatchesSha256OfBytes) {
  ScratchDir dir;
  std::string text;
  for (int i = 0; i < 100000; ++i) text += static_cast<char>(i * 31 % 251);
  write_file(dir / "f.bin", text);
  uint64_t size = 0;
  EXPECT_EQ(sha256_file(dir / "f.bin", &size), sha(text));
  EXPECT_EQ(size, text.size());
}

TEST(Checksum, Sha256OfManyFilesInParallelKeepsTheirOrderAndReportsAMissingOne) {
  ScratchDir dir;
  std::vector<std::filesystem::path> paths;
  for (int i = 0; i < 11; ++i) {
    paths.push_back(dir / ("f" + std::to_string(i)));
    write_file(paths.back(), std::string(static_cast<size_t>(1000 * i + 1), static_cast<char>('a' + i)));
  }
  const auto digests = sha256_files(paths);
  ASSERT_EQ(digests.size(), paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    EXPECT_EQ(digests[i].sha256, sha(read_file(paths[i]))) << i;
    EXPECT_EQ(digests[i].size, 1000 * i + 1) << i;
  }
  paths.push_back(dir / "missing");
  EXPECT_THROW(sha256_files(paths), Error);
}

TEST(Checksum, Crc32cMatchesCheckValue) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32c(check.data(), check.size()), 0xE3069283u);
  // Incremental use gives the same result.
  EXPECT_EQ(crc32c(check.data() + 4, 5, crc32c(check.data(), 4)), 0xE3069283u);
}

}  // namespace
}  // namespace ft::test
