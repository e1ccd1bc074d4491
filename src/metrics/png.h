// A small PNG writer (no zlib dependency): 8-bit RGB, filter 0 rows, one zlib stream compressed with
// fixed-Huffman deflate and LZ77 matches, CRC-32 per chunk and Adler-32 of the raw data.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace ft::metrics {

// A complete zlib stream (RFC 1950) of `raw`, deflate-compressed (RFC 1951, fixed Huffman codes).
std::string zlib_compress(std::string_view raw);

// PNG bytes of a `width` x `height` image; `rgb` holds width*height*3 bytes, rows top to bottom.
std::string encode_png_rgb(int width, int height, const std::vector<uint8_t>& rgb);

// Writes encode_png_rgb() to `path`; throws ft::Error when the file cannot be written.
void write_png_rgb(const std::filesystem::path& path, int width, int height, const std::vector<uint8_t>& rgb);

}  // namespace ft::metrics
