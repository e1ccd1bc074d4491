// RAII wrapper around a PCRE2 pattern compiled with UTF + UCP (Unicode properties for \s, \w, \p{..}) and JIT.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ft::tok {

// Thrown for a pattern PCRE2 rejects; the tokenizer loaders turn it into a ConfigError naming file and JSON path.
class RegexError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Regex {
 public:
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  const std::string& pattern() const { return pattern_; }

  // Non-overlapping matches, left to right, as byte ranges [start, end). The subject must be valid UTF-8 (checked
  // once by the caller; PCRE2's own check is switched off for speed). An empty match advances by one character.
  void find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  struct Code;
  std::string pattern_;
  std::unique_ptr<Code> code_;
};

// A literal or a regular expression, as tokenizer.json's {"String": ...} / {"Regex": ...} patterns.
class Pattern {
 public:
  static Pattern literal(std::string text);
  static Pattern regex(const std::string& pattern);
  void find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const;
  // Replaces every match with `content`.
  std::string replace_all(std::string_view subject, std::string_view content) const;

 private:
  std::string literal_;
  std::shared_ptr<Regex> regex_;
};

}  // namespace ft::tok
