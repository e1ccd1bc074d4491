#include "metrics/png.h"

#include <array>
#include <fstream>

#include "util/checksum.h"
#include "util/error.h"

namespace ft::metrics {
namespace {

constexpr std::array<int, 29> kLenBase = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                          31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
constexpr std::array<int, 29> kLenExtra = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                           2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
constexpr std::array<int, 30> kDistBase = {1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,   97,   129,
                                           193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
constexpr std::array<int, 30> kDistExtra = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6,
                                            6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

// Deflate packs bits LSB-first; Huffman codes are stored most significant bit first.
class BitWriter {
 public:
  void bits(uint32_t value, int n) {
    for (int i = 0; i < n; ++i) {
      acc_ |= ((value >> i) & 1u) << nbits_;
      if (++nbits_ == 8) flush_byte();
    }
  }
  void code(uint32_t code, int n) {
    for (int i = n - 1; i >= 0; --i) bits((code >> i) & 1u, 1);
  }
  std::string finish() {
    if (nbits_ > 0) flush_byte();
    return std::move(out_);
  }

 private:
  void flush_byte() {
    out_.push_back(static_cast<char>(acc_));
    acc_ = 0;
    nbits_ = 0;
  }
  std::string out_;
  uint32_t acc_ = 0;
  int nbits_ = 0;
};

void put_symbol(BitWriter& w, int sym) {  // fixed literal/length code (RFC 1951 3.2.6)
  if (sym < 144) w.code(static_cast<uint32_t>(0x30 + sym), 8);
  else if (sym < 256) w.code(static_cast<uint32_t>(0x190 + sym - 144), 9);
  else if (sym < 280) w.code(static_cast<uint32_t>(sym - 256), 7);
  else w.code(static_cast<uint32_t>(0xC0 + sym - 280), 8);
}

void put_match(BitWriter& w, int length, int distance) {
  int li = 28;
  while (kLenBase[static_cast<size_t>(li)] > length) --li;
  put_symbol(w, 257 + li);
  w.bits(static_cast<uint32_t>(length - kLenBase[static_cast<size_t>(li)]), kLenExtra[static_cast<size_t>(li)]);
  int di = 29;
  while (kDistBase[static_cast<size_t>(di)] > distance) --di;
  w.code(static_cast<uint32_t>(di), 5);
  w.bits(static_cast<uint32_t>(distance - kDistBase[static_cast<size_t>(di)]), kDistExtra[static_cast<size_t>(di)]);
}

void put_be32(std::string& out, uint32_t v) {
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_chunk(std::string& out, const char* type, const std::string& body) {
  put_be32(out, static_cast<uint32_t>(body.size()));
  std::string typed = std::string(type, 4) + body;
  out += typed;
  put_be32(out, crc32(typed.data(), typed.size()));
}

}  // namespace

std::string zlib_compress(std::string_view raw) {
  constexpr int kWindow = 32768, kMaxLen = 258, kHashBits = 15, kMaxChain = 32;
  const auto* p = reinterpret_cast<const uint8_t*>(raw.data());
  const int n = static_cast<int>(raw.size());
  std::vector<int> head(1 << kHashBits, -1), prev(static_cast<size_t>(n), -1);
  auto hash = [&](int i) {
    return static_cast<int>(((uint32_t{p[i]} << 10) ^ (uint32_t{p[i + 1]} << 5) ^ p[i + 2]) & ((1u << kHashBits) - 1));
  };
  BitWriter w;
  w.bits(1, 1);  // BFINAL: a single block
  w.bits(1, 2);  // BTYPE 01: fixed Huffman codes
  auto insert = [&](int i) {
    if (i + 2 >= n) return;
    const int h = hash(i);
    prev[static_cast<size_t>(i)] = head[static_cast<size_t>(h)];
    head[static_cast<size_t>(h)] = i;
  };
  int i = 0;
  while (i < n) {
    int best_len = 0, best_dist = 0;
    if (i + 2 < n) {
      int cand = head[static_cast<size_t>(hash(i))];
      for (int chain = 0; cand >= 0 && i - cand <= kWindow && chain < kMaxChain; ++chain) {
        int len = 0;
        const int limit = std::min(kMaxLen, n - i);
        while (len < limit && p[cand + len] == p[i + len]) ++len;
        if (len > best_len) {
          best_len = len;
          best_dist = i - cand;
          if (len == limit) break;
        }
        cand = prev[static_cast<size_t>(cand)];
      }
    }
    if (best_len >= 3) {
      put_match(w, best_len, best_dist);
      for (int k = 0; k < best_len; ++k) insert(i + k);
      i += best_len;
    } else {
      put_symbol(w, p[i]);
      insert(i);
      ++i;
    }
  }
  put_symbol(w, 256);  // end of block
  std::string out = "\x78\x9c";  // deflate, 32 KiB window; (0x789c % 31) == 0
  out += w.finish();
  put_be32(out, adler32(raw.data(), raw.size()));
  return out;
}

std::string encode_png_rgb(int width, int height, const std::vector<uint8_t>& rgb) {
  FT_CHECK(width > 0 && height > 0, "PNG size must be positive");
  const size_t row = static_cast<size_t>(width) * 3;
  FT_CHECK(rgb.size() == row * static_cast<size_t>(height), "PNG pixel buffer has the wrong size");
  std::string raw;
  raw.reserve((row + 1) * static_cast<size_t>(height));
  for (int y = 0; y < height; ++y) {
    raw.push_back('\0');  // filter type 0 (none)
    raw.append(reinterpret_cast<const char*>(rgb.data()) + row * static_cast<size_t>(y), row);
  }
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put_be32(ihdr, static_cast<uint32_t>(width));
  put_be32(ihdr, static_cast<uint32_t>(height));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8 bit, RGB, deflate, filter 0, no interlace
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", zlib_compress(raw));
  put_chunk(png, "IEND", "");
  return png;
}

void write_png_rgb(const std::filesystem::path& path, int width, int height, const std::vector<uint8_t>& rgb) {
  const std::string bytes = encode_png_rgb(width, height, rgb);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw Error("cannot write '" + path.string() + "'", "check the --out path and free disk space");
}

}  // namespace ft::metrics
