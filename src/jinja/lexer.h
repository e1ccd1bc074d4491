// Lexer of ft::jinja (internal): template source -> tokens, as jinja2's lexer.py with trim_blocks and lstrip_blocks.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ft::jinja::detail {

// What a syntax error tells the user to do (ConfigError's hint).
extern const char* kHint;

enum class TT : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  TT type;
  std::string value;  // Data text, name, unescaped string, operator
  int64_t ival = 0;
  double fval = 0;
  int line = 1, col = 1;
};

class Lexer {
 public:
  Lexer(const std::string& source, const std::string& name);
  std::vector<Token> run();
  [[noreturn]] void fail(size_t pos, const std::string& what) const;

 private:
  std::pair<int, int> where(size_t pos) const;
  void emit(TT type, std::string value, size_t pos);
  static void apply_strip(std::string& text, char sign, bool lstrip_applies, bool line_starting);
  size_t raw_tag_end(size_t q) const;
  size_t skip_comment(size_t q, size_t begin, bool& line_starting);
  size_t lex_raw(size_t body, size_t begin, bool line_starting_after_begin, bool& line_starting);
  size_t lex_tag(size_t pos, bool block, size_t begin, bool& line_starting);
  size_t lex_tag_end(size_t pos, bool block, bool& line_starting);
  size_t lex_operator(size_t pos, std::vector<char>& balance);
  size_t lex_number(size_t pos);
  size_t lex_string(size_t pos);
  std::string unescape(size_t begin, size_t end) const;
  size_t lex_hex_escape(size_t k, size_t end, int count, std::string& out) const;

  std::string name_;
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace ft::jinja::detail
