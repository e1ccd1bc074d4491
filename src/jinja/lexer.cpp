// Lexer of ft::jinja: template source -> tokens, following jinja2's lexer.py (trim_blocks and lstrip_blocks on):
// data, tags and comments, whitespace control, {% raw %}, numbers and Python string literals.
#include <algorithm>
#include <cstring>

#include "jinja/lexer.h"
#include "jinja/strings.h"

namespace ft::jinja::detail {

const char* kHint =
    "ft::jinja implements the Jinja subset that Hugging Face chat templates use (see src/jinja/template.h); "
    "rewrite the template without this construct, or extend src/jinja.";

namespace {

bool ascii_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1C && c <= 0x1F);
}

}  // namespace

Lexer::Lexer(const std::string& source, const std::string& name) : name_(name) {
  // jinja2: \r\n and \r become \n; one trailing newline is dropped (keep_trailing_newline=False).
  src_.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      src_ += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      src_ += source[k];
    }
  }
  if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  line_starts_.push_back(0);
  for (size_t k = 0; k < src_.size(); ++k)
    if (src_[k] == '\n') line_starts_.push_back(k + 1);
}

std::vector<Token> Lexer::run() {
  size_t n = src_.size();
  size_t pos = 0;
  bool line_starting = true;
  while (pos < n) {
    size_t k = pos;
    while (k + 1 < n && !(src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#'))) ++k;
    if (k + 1 >= n) {
      emit(TT::Data, src_.substr(pos), pos);
      break;
    }
    std::string text = src_.substr(pos, k - pos);
    char kind = src_[k + 1];
    size_t q = k + 2;
    char sign = 0;
    if (q < n && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
    size_t raw_end = kind == '%' ? raw_tag_end(q) : 0;
    apply_strip(text, sign, kind != '{', line_starting);
    if (!text.empty()) emit(TT::Data, text, pos);
    if (raw_end != 0) {
      pos = lex_raw(raw_end, k, src_[raw_end - 1] == '\n', line_starting);
      continue;
    }
    if (kind == '#') {
      pos = skip_comment(q, k, line_starting);
      continue;
    }
    bool block = kind == '%';
    emit(block ? TT::BlockBegin : TT::VarBegin, "", k);
    pos = lex_tag(q, block, k, line_starting);
  }
  emit(TT::Eof, "", src_.size());
  return std::move(tokens_);
}

// After "{%" and its sign at q: the end of a {% raw %} tag (with its whitespace control), 0 when the tag is not one.
size_t Lexer::raw_tag_end(size_t q) const {
  size_t n = src_.size();
  size_t r = q;
  while (r < n && ascii_ws(src_[r])) ++r;
  if (src_.compare(r, 3, "raw") != 0) return 0;
  r += 3;
  while (r < n && ascii_ws(src_[r])) ++r;
  if (src_.compare(r, 3, "-%}") == 0) {
    r += 3;
    while (r < n && ascii_ws(src_[r])) ++r;
    return r;
  }
  if (src_.compare(r, 2, "%}") == 0) return r + 2;
  return 0;
}

// After "{#" and its sign at q (the tag at `begin`): where the text after the comment starts.
size_t Lexer::skip_comment(size_t q, size_t begin, bool& line_starting) {
  size_t n = src_.size();
  size_t j = q;
  for (;; ++j) {
    if (j + 1 >= n) fail(begin, "Missing end of comment tag");
    if (src_[j] == '#' && src_[j + 1] == '}') break;
  }
  char esign = (j > q && (src_[j - 1] == '-' || src_[j - 1] == '+')) ? src_[j - 1] : 0;
  size_t pos = j + 2;
  if (esign == '-') {
    while (pos < n && ascii_ws(src_[pos])) ++pos;
  } else if (esign != '+' && pos < n && src_[pos] == '\n') {
    ++pos;
  }
  line_starting = src_[pos - 1] == '\n';
  return pos;
}

void Lexer::fail(size_t pos, const std::string& what) const {
  auto [line, col] = where(pos);
  throw ConfigError(name_ + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " + what, kHint);
}

std::pair<int, int> Lexer::where(size_t pos) const {
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
  size_t li = static_cast<size_t>(it - line_starts_.begin()) - 1;
  return {static_cast<int>(li + 1), static_cast<int>(pos - line_starts_[li] + 1)};
}

void Lexer::emit(TT type, std::string value, size_t pos) {
  Token t;
  t.type = type;
  t.value = std::move(value);
  auto [line, col] = where(pos);
  t.line = line;
  t.col = col;
  tokens_.push_back(std::move(t));
}

// OptionalLStrip: '-' strips all trailing whitespace; otherwise lstrip_blocks strips the spaces between the line
// start and a block/comment tag.
void Lexer::apply_strip(std::string& text, char sign, bool lstrip_applies, bool line_starting) {
  if (sign == '-') {
    size_t e = text.size();
    while (e > 0 && ascii_ws(text[e - 1])) --e;
    text.resize(e);
  } else if (sign != '+' && lstrip_applies) {
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
      bool all_ws = true;
      for (size_t k = l_pos; k < text.size(); ++k) all_ws = all_ws && ascii_ws(text[k]);
      if (all_ws) text.resize(l_pos);
    }
  }
}

size_t Lexer::lex_raw(size_t body, size_t begin, bool line_starting_after_begin, bool& line_starting) {
  size_t n = src_.size();
  for (size_t p = body; p + 1 < n; ++p) {
    if (!(src_[p] == '{' && src_[p + 1] == '%')) continue;
    size_t r = p + 2;
    char sign = 0;
    if (r < n && (src_[r] == '-' || src_[r] == '+')) sign = src_[r++];
    while (r < n && ascii_ws(src_[r])) ++r;
    if (src_.compare(r, 6, "endraw") != 0) continue;
    r += 6;
    while (r < n && ascii_ws(src_[r])) ++r;
    size_t end;
    if (src_.compare(r, 3, "+%}") == 0) {
      end = r + 3;
    } else if (src_.compare(r, 3, "-%}") == 0) {
      end = r + 3;
      while (end < n && ascii_ws(src_[end])) ++end;
    } else if (src_.compare(r, 2, "%}") == 0) {
      end = r + 2;
      if (end < n && src_[end] == '\n') ++end;
    } else {
      continue;
    }
    std::string text = src_.substr(body, p - body);
    apply_strip(text, sign, true, line_starting_after_begin);
    if (!text.empty()) emit(TT::Data, text, body);
    line_starting = src_[end - 1] == '\n';
    return end;
  }
  fail(begin, "Missing end of raw directive");
}

// The tag's end at pos ("%}" or "}}" with its whitespace control), emitted: where the text after it starts, 0 when
// the tag does not end at pos.
size_t Lexer::lex_tag_end(size_t pos, bool block, bool& line_starting) {
  size_t n = src_.size();
  const char* close = block ? "%}" : "}}";
  if (block && src_.compare(pos, 3, "+%}") == 0) {
    emit(TT::BlockEnd, "", pos);
    line_starting = false;
    return pos + 3;
  }
  if (src_.compare(pos, 1, "-") == 0 && src_.compare(pos + 1, 2, close) == 0) {
    emit(block ? TT::BlockEnd : TT::VarEnd, "", pos);
    size_t e = pos + 3;
    while (e < n && ascii_ws(src_[e])) ++e;
    line_starting = src_[e - 1] == '\n';
    return e;
  }
  if (src_.compare(pos, 2, close) == 0) {
    emit(block ? TT::BlockEnd : TT::VarEnd, "", pos);
    size_t e = pos + 2;
    if (block && e < n && src_[e] == '\n') ++e;  // trim_blocks
    line_starting = src_[e - 1] == '\n';
    return e;
  }
  return 0;
}

// The operator at pos, emitted, with the brackets it opens or closes kept balanced: where the next token starts.
size_t Lexer::lex_operator(size_t pos, std::vector<char>& balance) {
  char c = src_[pos];
  static const char* ops2[] = {"//", "**", "==", "!=", ">=", "<="};
  std::string op;
  for (const char* o : ops2)
    if (src_.compare(pos, 2, o) == 0) op = o;
  if (op.empty() && std::strchr("+-/*%~[](){}><=.:|,;", c) != nullptr) op = std::string(1, c);
  if (op.empty()) fail(pos, std::string("unexpected char '") + c + "'");
  if (op == "(" || op == "[" || op == "{") {
    balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
  } else if (op == ")" || op == "]" || op == "}") {
    if (balance.empty()) fail(pos, "unexpected '" + op + "'");
    if (balance.back() != op[0]) fail(pos, "unexpected '" + op + "', expected '" + balance.back() + "'");
    balance.pop_back();
  }
  emit(TT::Op, op, pos);
  return pos + op.size();
}

size_t Lexer::lex_tag(size_t pos, bool block, size_t begin, bool& line_starting) {
  size_t n = src_.size();
  std::vector<char> balance;
  while (true) {
    if (pos >= n)
      fail(begin, block ? "unexpected end of template: missing '%}'"
                        : "unexpected end of template: "
                          "missing '}}'");
    if (balance.empty()) {
      size_t end = lex_tag_end(pos, block, line_starting);
      if (end != 0) return end;
    }
    char c = src_[pos];
    if (ascii_ws(c)) {
      ++pos;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      pos = lex_number(pos);
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = pos;
      while (e < n && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
      emit(TT::Name, src_.substr(pos, e - pos), pos);
      pos = e;
    } else if (c == '\'' || c == '"') {
      pos = lex_string(pos);
    } else {
      pos = lex_operator(pos, balance);
    }
  }
}

size_t Lexer::lex_number(size_t pos) {
  size_t n = src_.size();
  auto digits = [&](size_t p) {  // (\d+_)*\d+ ; returns end or p when none
    size_t e = p;
    while (e < n && std::isdigit(static_cast<unsigned char>(src_[e]))) {
      ++e;
      if (e + 1 < n && src_[e] == '_' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) ++e;
    }
    return e;
  };
  auto clean = [](std::string s) {
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    return s;
  };
  if (src_[pos] == '0' && pos + 1 < n && std::strchr("xXoObB", src_[pos + 1]) != nullptr) {
    int base = (src_[pos + 1] == 'x' || src_[pos + 1] == 'X')   ? 16
               : (src_[pos + 1] == 'o' || src_[pos + 1] == 'O') ? 8
                                                                : 2;
    size_t e = pos + 2;
    while (e < n && (std::isxdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
    Token t;
    emit(TT::Int, "", pos);
    tokens_.back().ival = std::strtoll(clean(src_.substr(pos + 2, e - pos - 2)).c_str(), nullptr, base);
    return e;
  }
  size_t e = digits(pos);
  bool prev_dot = pos > 0 && src_[pos - 1] == '.';
  size_t frac_end = e;
  if (!prev_dot && e + 1 < n && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1])))
    frac_end = digits(e + 1);
  size_t exp_end = 0;
  {
    size_t x = frac_end;
    if (!prev_dot && x < n && (src_[x] == 'e' || src_[x] == 'E')) {
      ++x;
      if (x < n && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < n && std::isdigit(static_cast<unsigned char>(src_[x]))) exp_end = digits(x);
    }
  }
  if (exp_end || frac_end != e) {
    size_t end = exp_end ? exp_end : frac_end;
    emit(TT::Float, "", pos);
    tokens_.back().fval = std::strtod(clean(src_.substr(pos, end - pos)).c_str(), nullptr);
    return end;
  }
  if (src_[pos] == '0') {  // jinja2: 0(_?0)* -- "007" lexes as 00 then 7
    e = pos + 1;
    while (e < n && (src_[e] == '0' || (src_[e] == '_' && e + 1 < n && src_[e + 1] == '0'))) ++e;
  }
  emit(TT::Int, "", pos);
  errno = 0;
  tokens_.back().ival = std::strtoll(clean(src_.substr(pos, e - pos)).c_str(), nullptr, 10);
  if (errno == ERANGE) fail(pos, "integer literal too large");
  return e;
}

// The character a one-letter escape (\n, \t, \', ...) stands for; 0 when `d` does not make one.
static char simple_escape(char d) {
  switch (d) {
    case '\\':
      return '\\';
    case '\'':
      return '\'';
    case '"':
      return '"';
    case 'a':
      return '\a';
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case 'v':
      return '\v';
    default:
      return 0;
  }
}

// The \x, \u or \U escape whose letter is at k, of `count` hex digits, in a string that ends at `end`: appends the
// code point to out and returns the position of its last digit.
size_t Lexer::lex_hex_escape(size_t k, size_t end, int count, std::string& out) const {
  if (k + static_cast<size_t>(count) >= end + 1) fail(k, "truncated \\x/\\u escape in string");
  std::string h = src_.substr(k + 1, static_cast<size_t>(count));
  for (char x : h)
    if (!std::isxdigit(static_cast<unsigned char>(x))) fail(k, "truncated \\x/\\u escape in string");
  append_utf8(out, static_cast<char32_t>(std::strtoul(h.c_str(), nullptr, 16)));
  return k + static_cast<size_t>(count);
}

// Python's unicode-escape decoding of a string literal's body [begin, end).
std::string Lexer::unescape(size_t begin, size_t end) const {
  std::string out;
  for (size_t k = begin; k < end; ++k) {
    char c = src_[k];
    if (c != '\\') {
      out += c;
      continue;
    }
    char d = src_[++k];
    if (d == '\n') continue;  // a backslash-newline continues the line
    if (char e = simple_escape(d)) {
      out += e;
    } else if (d == 'x' || d == 'u' || d == 'U') {
      k = lex_hex_escape(k, end, d == 'x' ? 2 : d == 'u' ? 4 : 8, out);
    } else if (d == 'N') {
      fail(k, "\\N{...} escapes are not supported");
    } else if (d >= '0' && d <= '7') {
      unsigned v = 0;
      int cnt = 0;
      while (cnt < 3 && k < end && src_[k] >= '0' && src_[k] <= '7') {
        v = v * 8 + static_cast<unsigned>(src_[k] - '0');
        ++k;
        ++cnt;
      }
      --k;
      append_utf8(out, static_cast<char32_t>(v));
    } else {
      out += '\\';
      out += d;
    }
  }
  return out;
}

size_t Lexer::lex_string(size_t pos) {
  size_t n = src_.size();
  char quote = src_[pos];
  size_t e = pos + 1;
  while (e < n && src_[e] != quote) {
    if (src_[e] == '\\') ++e;
    ++e;
  }
  if (e >= n) fail(pos, "unexpected end of string");
  emit(TT::String, unescape(pos + 1, e), pos);
  return e + 1;
}

}  // namespace ft::jinja::detail
