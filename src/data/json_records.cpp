#include "data/json_records.h"

#include "util/error.h"

namespace ft::data {
namespace {

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

}  // namespace

RecordReader::RecordReader(const std::filesystem::path& path, int64_t max_record_bytes, int64_t max_array_bytes)
    : path_(path), max_record_bytes_(max_record_bytes), in_(path, std::ios::binary) {
  if (!in_) throw Error("cannot read " + path.string(), "check the data path and permissions");
  // A UTF-8 byte order mark may start either layout (JSON Lines' first record parses past it).
  char bom[3] = {};
  const bool has_bom = in_.read(bom, 3) && bom[0] == '\xEF' && bom[1] == '\xBB' && bom[2] == '\xBF';
  in_.clear();
  in_.seekg(has_bom ? 3 : 0);
  char c = 0;
  while (in_.get(c) && blank(c)) {
  }
  if (in_ && c == '[') {
    array_ = true;
    in_.seekg(0, std::ios::end);
    const int64_t size = in_.tellg();
    if (size > max_array_bytes) {
      throw Error(path.string() + ": a JSON array file of " + std::to_string(size >> 20) + " MiB (more than " +
                      std::to_string(max_array_bytes >> 20) + " MiB are not read whole)",
                  "convert it to JSON Lines, one record per line: jq -c '.[]' FILE > FILE.jsonl");
    }
    text_.resize(static_cast<size_t>(size));
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

// One line into `out` (without the newline), read in pieces so a line over the limit fails before it is held.
bool RecordReader::read_line(std::string& out) {
  out.clear();
  char buf[1 << 16];
  bool any = false;
  while (true) {
    in_.getline(buf, sizeof buf);
    const std::streamsize got = in_.gcount();
    any = any || got > 0;
    const bool full = in_.fail() && !in_.eof() && got == static_cast<std::streamsize>(sizeof buf) - 1;
    out.append(buf, static_cast<size_t>(full ? got : std::max<std::streamsize>(0, got - (in_.eof() ? 0 : 1))));
    if (static_cast<int64_t>(out.size()) > max_record_bytes_) {
      const std::string limit = max_record_bytes_ >= (1 << 20) ? std::to_string(max_record_bytes_ >> 20) + " MiB"
                                                                : std::to_string(max_record_bytes_) + " bytes";
      throw Error(path_.string() + ":" + std::to_string(line_ + 1) + ": a line longer than " + limit,
                  "a JSON Lines file holds one record per line; split the record or check the file");
    }
    if (!full) return any || !in_.eof();
    in_.clear();  // the buffer filled before the newline: keep reading this line
  }
}

bool RecordReader::next(std::string& record, int64_t& line) {
  if (!array_) {
    while (read_line(record)) {
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
