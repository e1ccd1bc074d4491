#include "data/json_records.h"

#include "util/error.h"

namespace ft::data {
namespace {

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

}  // namespace

RecordReader::RecordReader(const std::filesystem::path& path) : path_(path), in_(path, std::ios::binary) {
  if (!in_) throw Error("cannot read " + path.string(), "check the data path and permissions");
  char c = 0;
  while (in_.get(c) && blank(c)) {
  }
  if (in_ && c == '[') {
    array_ = true;
    in_.seekg(0, std::ios::end);
    text_.resize(static_cast<size_t>(in_.tellg()));
    in_.seekg(0);
    if (!in_.read(text_.data(), static_cast<std::streamsize>(text_.size()))) {
      throw Error("cannot read " + path.string(), "check the data path and permissions");
    }
    pos_ = text_.find('[') + 1;
    line_ = 1;
    for (size_t i = 0; i < pos_; ++i) line_ += text_[i] == '\n' ? 1 : 0;
  } else {
    in_.clear();
    in_.seekg(0);
  }
}

bool RecordReader::next(std::string& record, int64_t& line) {
  if (!array_) {
    while (std::getline(in_, record)) {
      ++line_;
      if (!record.empty() && record.back() == '\r') record.pop_back();
      if (record.find_first_not_of(" \t") == std::string::npos) continue;
      line = line_;
      return true;
    }
    return false;
  }
  if (done_) return false;
  auto fail = [&](const std::string& what) {
    throw Error(path_.string() + ":" + std::to_string(line_) + ": " + what,
                "a .json data file is one array of records ([{...}, {...}]); JSON Lines has one record per line");
  };
  auto skip_blank = [&] {
    while (pos_ < text_.size() && blank(text_[pos_])) line_ += text_[pos_++] == '\n' ? 1 : 0;
  };
  skip_blank();
  if (pos_ < text_.size() && text_[pos_] == ']') {
    done_ = true;
    ++pos_;
    skip_blank();
    if (pos_ != text_.size()) fail("text after the closing ']' of the array");
    return false;
  }
  if (pos_ >= text_.size()) fail("the array is not closed (missing ']')");
  // One element: up to the ',' or ']' at depth 0 outside strings. It is parsed later, with the other records.
  const size_t start = pos_;
  line = line_;
  int depth = 0;
  bool in_string = false;
  for (; pos_ < text_.size(); ++pos_) {
    const char c = text_[pos_];
    if (c == '\n') ++line_;
    if (in_string) {
      if (c == '\\') {
        ++pos_;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (depth == 0) break;  // the array's own ']'
      --depth;
    } else if (c == ',' && depth == 0) {
      break;
    }
  }
  if (pos_ >= text_.size()) fail("the array is not closed (missing ']')");
  record.assign(text_, start, pos_ - start);
  if (text_[pos_] == ',') {
    ++pos_;
    skip_blank();
    if (pos_ < text_.size() && text_[pos_] == ']') fail("a trailing ',' before the closing ']'");
  }
  if (record.find_first_not_of(" \t\r\n") == std::string::npos) fail("an empty array element");
  return true;
}

}  // namespace ft::data
