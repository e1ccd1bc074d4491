// The records of a data file: JSON Lines (one object per non-blank line) or one JSON array of objects (a .json file
// as datasets.Dataset.to_json(lines=False) and many hand-made files write it), read in order with the line each
// record starts on, so errors can name file:line either way.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace ft::data {

class RecordReader {
 public:
  static constexpr int64_t kMaxRecordBytes = int64_t{256} << 20;  // a longer JSON Lines line is refused
  static constexpr int64_t kMaxArrayBytes = int64_t{2} << 30;     // a larger JSON array file is refused

  // Opens `path`; throws ft::Error when it cannot be read. The layout is decided by the first non-blank byte: '['
  // is a JSON array (read whole, so at most `max_array_bytes`; its elements are split without being parsed),
  // anything else JSON Lines (lines of at most `max_record_bytes`, so memory stays bounded whatever the file holds).
  explicit RecordReader(const std::filesystem::path& path, int64_t max_record_bytes = kMaxRecordBytes,
                        int64_t max_array_bytes = kMaxArrayBytes);

  // The next record's text and the 1-based line it starts on; false at the end. A JSON array that is not closed,
  // or holds something between elements other than a comma, and a line over the limit throw ft::Error naming
  // file:line.
  bool next(std::string& record, int64_t& line);

  bool is_array() const { return array_; }

 private:
  bool read_line(std::string& out);

  std::filesystem::path path_;
  int64_t max_record_bytes_;
  std::ifstream in_;
  bool array_ = false;
  std::string text_;  // the whole file (array layout)
  size_t pos_ = 0;    // array: the scan position in text_
  int64_t line_ = 0;  // lines: the last line read; array: the line of pos_
  bool done_ = false;
};

}  // namespace ft::data
