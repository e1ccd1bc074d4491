// Hand-written checksums against published test vectors.
#include <gtest/gtest.h>

#include <string>

#include "scratch_dir.h"
#include "support/test_support.h"
#include "train/checksum.h"

namespace ft::test {
namespace {

std::string sha(const std::string& s) {
  train::Sha256 h;
  h.update(s);
  return h.hex_digest();
}

TEST(Checksum, Sha256MatchesFipsVectors) {
  EXPECT_EQ(sha(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a', fed in uneven pieces to exercise the buffering.
  train::Sha256 h;
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
  EXPECT_EQ(train::sha256_file(dir / "f.bin", &size), sha(text));
  EXPECT_EQ(size, text.size());
}

TEST(Checksum, CrcAndAdlerMatchCheckValues) {
  const std::string check = "123456789";
  EXPECT_EQ(train::crc32c(check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(train::crc32(check.data(), check.size()), 0xCBF43926u);
  // Incremental use gives the same result.
  EXPECT_EQ(train::crc32(check.data() + 4, 5, train::crc32(check.data(), 4)), 0xCBF43926u);
  const std::string wiki = "Wikipedia";
  EXPECT_EQ(train::adler32(wiki.data(), wiki.size()), 0x11E60398u);
}

}  // namespace
}  // namespace ft::test
