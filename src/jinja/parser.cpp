// Lexer and parser for ft::jinja, following jinja2's lexer.py/parser.py (trim_blocks and lstrip_blocks on).
#include <cstring>
#include <set>

#include "jinja/internal.h"

namespace ft::jinja::detail {
namespace {

const char* kHint =
    "ft::jinja implements the Jinja subset that Hugging Face chat templates use (see src/jinja/template.h); "
    "rewrite the template without this construct, or extend src/jinja.";

enum class TT : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  TT type;
  std::string value;  // Data text, name, unescaped string, operator
  int64_t ival = 0;
  double fval = 0;
  int line = 1, col = 1;
};

bool ascii_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' ||
                               (c >= 0x1C && c <= 0x1F); }

class Lexer {
 public:
  Lexer(const std::string& source, const std::string& name) : name_(name) {
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

  std::vector<Token> run() {
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
      // {% raw %}
      bool raw = false;
      size_t raw_end = 0;
      if (kind == '%') {
        size_t r = q;
        while (r < n && ascii_ws(src_[r])) ++r;
        if (src_.compare(r, 3, "raw") == 0) {
          r += 3;
          while (r < n && ascii_ws(src_[r])) ++r;
          if (src_.compare(r, 3, "-%}") == 0) {
            raw = true;
            r += 3;
            while (r < n && ascii_ws(src_[r])) ++r;
            raw_end = r;
          } else if (src_.compare(r, 2, "%}") == 0) {
            raw = true;
            raw_end = r + 2;
          }
        }
      }
      apply_strip(text, sign, kind != '{', line_starting);
      if (!text.empty()) emit(TT::Data, text, pos);
      if (raw) {
        pos = lex_raw(raw_end, k, src_[raw_end - 1] == '\n', line_starting);
        continue;
      }
      if (kind == '#') {
        size_t j = q;
        for (;; ++j) {
          if (j + 1 >= n) fail(k, "Missing end of comment tag");
          if (src_[j] == '#' && src_[j + 1] == '}') break;
        }
        char esign = (j > q && (src_[j - 1] == '-' || src_[j - 1] == '+')) ? src_[j - 1] : 0;
        pos = j + 2;
        if (esign == '-') {
          while (pos < n && ascii_ws(src_[pos])) ++pos;
        } else if (esign != '+' && pos < n && src_[pos] == '\n') {
          ++pos;
        }
        line_starting = src_[pos - 1] == '\n';
        continue;
      }
      bool block = kind == '%';
      emit(block ? TT::BlockBegin : TT::VarBegin, "", k);
      pos = lex_tag(q, block, k, line_starting);
    }
    emit(TT::Eof, "", src_.size());
    return std::move(tokens_);
  }

  [[noreturn]] void fail(size_t pos, const std::string& what) const {
    auto [line, col] = where(pos);
    throw ConfigError(name_ + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " + what, kHint);
  }

 private:
  std::pair<int, int> where(size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    size_t li = static_cast<size_t>(it - line_starts_.begin()) - 1;
    return {static_cast<int>(li + 1), static_cast<int>(pos - line_starts_[li] + 1)};
  }

  void emit(TT type, std::string value, size_t pos) {
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
  static void apply_strip(std::string& text, char sign, bool lstrip_applies, bool line_starting) {
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

  size_t lex_raw(size_t body, size_t begin, bool line_starting_after_begin, bool& line_starting) {
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

  size_t lex_tag(size_t pos, bool block, size_t begin, bool& line_starting) {
    size_t n = src_.size();
    std::vector<char> balance;
    while (true) {
      if (pos >= n) fail(begin, block ? "unexpected end of template: missing '%}'" : "unexpected end of template: "
                                                                                      "missing '}}'");
      if (balance.empty()) {
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
      }
      char c = src_[pos];
      if (ascii_ws(c)) {
        ++pos;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        pos = lex_number(pos);
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos;
        while (e < n && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        emit(TT::Name, src_.substr(pos, e - pos), pos);
        pos = e;
        continue;
      }
      if (c == '\'' || c == '"') {
        pos = lex_string(pos);
        continue;
      }
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
      pos += op.size();
    }
  }

  size_t lex_number(size_t pos) {
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
      int base = (src_[pos + 1] == 'x' || src_[pos + 1] == 'X') ? 16 : (src_[pos + 1] == 'o' || src_[pos + 1] == 'O') ? 8 : 2;
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

  size_t lex_string(size_t pos) {
    size_t n = src_.size();
    char quote = src_[pos];
    size_t e = pos + 1;
    while (e < n && src_[e] != quote) {
      if (src_[e] == '\\') ++e;
      ++e;
    }
    if (e >= n) fail(pos, "unexpected end of string");
    // Python's unicode-escape decoding of the body.
    std::string out;
    for (size_t k = pos + 1; k < e; ++k) {
      char c = src_[k];
      if (c != '\\') {
        out += c;
        continue;
      }
      char d = src_[++k];
      auto hex = [&](int count) {
        if (k + static_cast<size_t>(count) >= e + 1) fail(k, "truncated \\x/\\u escape in string");
        std::string h = src_.substr(k + 1, static_cast<size_t>(count));
        for (char x : h)
          if (!std::isxdigit(static_cast<unsigned char>(x))) fail(k, "truncated \\x/\\u escape in string");
        k += static_cast<size_t>(count);
        utf8_append(out, static_cast<char32_t>(std::strtoul(h.c_str(), nullptr, 16)));
      };
      switch (d) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        case 'N': fail(k, "\\N{...} escapes are not supported");
        default:
          if (d >= '0' && d <= '7') {
            unsigned v = 0;
            int cnt = 0;
            while (cnt < 3 && k < e && src_[k] >= '0' && src_[k] <= '7') {
              v = v * 8 + static_cast<unsigned>(src_[k] - '0');
              ++k;
              ++cnt;
            }
            --k;
            utf8_append(out, static_cast<char32_t>(v));
          } else {
            out += '\\';
            out += d;
          }
      }
    }
    emit(TT::String, out, pos);
    return e + 1;
  }

  std::string name_;
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

// ------------------------------------------------------------------------------------------------------ parser

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name) : toks_(std::move(tokens)), name_(name) {}

  Body parse_all() {
    Body body = subparse({});
    if (cur().type != TT::Eof) fail(cur(), "unexpected '" + describe(cur()) + "'");
    return body;
  }

 private:
  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > 200) p_.fail(p_.cur(), "template nesting too deep (over 200 levels)");
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  const Token& cur() const { return toks_[pos_]; }
  const Token& look() const { return toks_[std::min(pos_ + 1, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is_name(const char* v) const { return cur().type == TT::Name && cur().value == v; }
  bool is_op(const char* v) const { return cur().type == TT::Op && cur().value == v; }
  bool skip_name(const char* v) {
    if (!is_name(v)) return false;
    next();
    return true;
  }
  bool skip_op(const char* v) {
    if (!is_op(v)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TT::Data: return "template data";
      case TT::VarBegin: return "{{";
      case TT::VarEnd: return "}}";
      case TT::BlockBegin: return "{%";
      case TT::BlockEnd: return "%}";
      case TT::Eof: return "end of template";
      case TT::Int: return std::to_string(t.ival);
      case TT::Float: return py_float_repr(t.fval);
      case TT::String: return py_str_repr(t.value);
      default: return t.value;
    }
  }

  [[noreturn]] void fail(const Token& t, const std::string& what) const {
    throw ConfigError(name_ + ":" + std::to_string(t.line) + ":" + std::to_string(t.col) + ": " + what, kHint);
  }
  void expect_op(const char* v) {
    if (!is_op(v)) fail(cur(), std::string("expected '") + v + "', got '" + describe(cur()) + "'");
    next();
  }
  void expect(TT type, const char* what) {
    if (cur().type != type) fail(cur(), std::string("expected ") + what + ", got '" + describe(cur()) + "'");
    next();
  }
  std::string expect_name() {
    if (cur().type != TT::Name) fail(cur(), "expected a name, got '" + describe(cur()) + "'");
    return next().value;
  }

  ExprP node(EK k, const Token& t) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = t.line;
    e->col = t.col;
    return e;
  }

  // ---- statements

  bool at_end_tokens(const std::vector<const char*>& ends) const {
    for (const char* e : ends)
      if (is_name(e)) return true;
    return false;
  }

  Body subparse(const std::vector<const char*>& ends) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TT::Eof) return body;
      if (t.type == TT::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = SK::Output;
        s->line = t.line;
        s->text = t.value;
        body.push_back(std::move(s));
        next();
      } else if (t.type == TT::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = SK::Print;
        s->line = cur().line;
        s->expr = parse_tuple(false, true, {}, false);
        expect(TT::VarEnd, "'}}'");
        body.push_back(std::move(s));
      } else if (t.type == TT::BlockBegin) {
        next();
        if (!ends.empty() && at_end_tokens(ends)) return body;
        body.push_back(parse_statement());
        expect(TT::BlockEnd, "'%}'");
      } else {
        fail(t, "unexpected '" + describe(t) + "'");
      }
    }
  }

  // Parses the body after a tag up to one of `ends`; leaves the end name current unless drop_needle.
  Body parse_statements(const std::vector<const char*>& ends, bool drop_needle, const Token& opener) {
    skip_op(":");
    expect(TT::BlockEnd, "'%}'");
    Body body = subparse(ends);
    if (cur().type == TT::Eof) {
      std::string want;
      for (const char* e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
      fail(opener, "unexpected end of template: the '" + opener.value + "' block opened here needs " + want);
    }
    if (drop_needle) next();
    return body;
  }

  StmtP make_stmt(SK k, const Token& t) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = t.line;
    return s;
  }

  StmtP parse_statement() {
    Depth d(*this);
    const Token& t = cur();
    if (t.type != TT::Name) fail(t, "tag name expected");
    const std::string& kw = t.value;
    if (kw == "for") return parse_for();
    if (kw == "if") return parse_if();
    if (kw == "set") return parse_set();
    if (kw == "macro") return parse_macro();
    if (kw == "call") return parse_call_block();
    if (kw == "filter") return parse_filter_block();
    if (kw == "with") return parse_with();
    if (kw == "print") {
      Token tok = next();
      auto s = make_stmt(SK::Print, tok);
      s->expr = parse_tuple(false, true, {}, false);
      return s;
    }
    if (kw == "break" || kw == "continue") {
      Token tok = next();
      if (loop_depth_ == 0) fail(tok, "'" + kw + "' outside of a loop");
      return make_stmt(kw == "break" ? SK::Break : SK::Continue, tok);
    }
    if (kw == "generation") {
      Token tok = next();
      auto s = make_stmt(SK::Generation, tok);
      int saved = loop_depth_;
      loop_depth_ = 0;  // the body is a caller() macro in jinja2
      s->body = parse_statements({"endgeneration"}, true, tok);
      loop_depth_ = saved;
      return s;
    }
    static const std::set<std::string> unsupported = {"block",  "extends", "include", "import", "from", "autoescape",
                                                      "do",     "trans",   "endblock", "raw"};
    if (unsupported.count(kw)) fail(t, "unsupported tag '" + kw + "'");
    fail(t, "unknown tag '" + kw + "'");
  }

  StmtP parse_for() {
    Token tok = next();
    auto s = make_stmt(SK::For, tok);
    s->target = parse_assign_target(true, {"in"}, false);
    if (!skip_name("in")) fail(cur(), "expected 'in' in for loop, got '" + describe(cur()) + "'");
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) fail(cur(), "unsupported: recursive for loops");
    ++loop_depth_;
    s->body = parse_statements({"endfor", "else"}, false, tok);
    --loop_depth_;
    if (next().value == "else") s->else_body = parse_statements({"endfor"}, true, tok);
    return s;
  }

  StmtP parse_if() {
    Token tok = next();
    auto s = make_stmt(SK::If, tok);
    s->expr = parse_tuple(false, false, {}, false);
    s->body = parse_statements({"elif", "else", "endif"}, false, tok);
    Stmt* tail = s.get();
    while (true) {
      Token t = next();
      if (t.value == "elif") {
        auto e = make_stmt(SK::If, t);
        e->expr = parse_tuple(false, false, {}, false);
        e->body = parse_statements({"elif", "else", "endif"}, false, tok);
        Stmt* raw = e.get();
        tail->else_body.push_back(std::move(e));
        tail = raw;
      } else if (t.value == "else") {
        tail->else_body = parse_statements({"endif"}, true, tok);
        break;
      } else {
        break;
      }
    }
    return s;
  }

  StmtP parse_set() {
    Token tok = next();
    ExprP target = parse_assign_target(true, {}, true);
    if (skip_op("=")) {
      auto s = make_stmt(SK::Set, tok);
      s->target = std::move(target);
      s->expr = parse_tuple(false, true, {}, false);
      return s;
    }
    auto s = make_stmt(SK::SetBlock, tok);
    if (target->kind != EK::Name) fail(tok, "a {% set %} block needs a plain name");
    s->target = std::move(target);
    if (is_op("|")) s->expr = parse_filter(nullptr, false);
    s->body = parse_statements({"endset"}, true, tok);
    return s;
  }

  void parse_signature(MacroDef& m) {
    expect_op("(");
    while (!is_op(")")) {
      if (!m.params.empty()) expect_op(",");
      if (is_op(")")) break;
      Token t = cur();
      std::string p = expect_name();
      m.params.push_back(p);
      if (skip_op("=")) {
        m.defaults.push_back(parse_expression(true));
      } else if (!m.defaults.empty()) {
        fail(t, "non-default argument follows default argument");
      }
    }
    expect_op(")");
  }

  StmtP parse_macro() {
    Token tok = next();
    auto s = make_stmt(SK::Macro, tok);
    s->macro = std::make_shared<MacroDef>();
    s->macro->name = expect_name();
    parse_signature(*s->macro);
    int saved = loop_depth_;
    loop_depth_ = 0;
    macro_stack_.push_back(s->macro.get());
    s->macro->body = parse_statements({"endmacro"}, true, tok);
    macro_stack_.pop_back();
    loop_depth_ = saved;
    return s;
  }

  StmtP parse_call_block() {
    Token tok = next();
    auto s = make_stmt(SK::CallBlock, tok);
    s->macro = std::make_shared<MacroDef>();
    s->macro->name = "caller";
    if (is_op("(")) parse_signature(*s->macro);
    s->expr = parse_expression(true);
    if (s->expr->kind != EK::Call) fail(tok, "expected a call after {% call %}");
    int saved = loop_depth_;
    loop_depth_ = 0;
    macro_stack_.push_back(s->macro.get());
    s->macro->body = parse_statements({"endcall"}, true, tok);
    macro_stack_.pop_back();
    loop_depth_ = saved;
    return s;
  }

  StmtP parse_filter_block() {
    Token tok = next();
    auto s = make_stmt(SK::FilterBlock, tok);
    s->expr = parse_filter(nullptr, true);
    s->body = parse_statements({"endfilter"}, true, tok);
    return s;
  }

  StmtP parse_with() {
    Token tok = next();
    auto s = make_stmt(SK::With, tok);
    while (cur().type != TT::BlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(parse_assign_target(true, {}, false));
      expect_op("=");
      s->values.push_back(parse_expression(true));
    }
    s->body = parse_statements({"endwith"}, true, tok);
    return s;
  }

  ExprP parse_assign_target(bool with_tuple, const std::vector<const char*>& extra_end, bool with_namespace) {
    if (with_namespace && cur().type == TT::Name && look().type == TT::Op && look().value == ".") {
      Token t = cur();
      auto n = node(EK::GetAttr, t);
      auto obj = node(EK::Name, t);
      obj->name = next().value;
      next();
      n->name = expect_name();
      n->a = std::move(obj);
      return n;
    }
    ExprP target = with_tuple ? parse_tuple(true, true, extra_end, false) : parse_primary();
    auto check = [&](const Expr& e) {
      if (e.kind != EK::Name) fail(cur(), "can't assign to this expression");
      if (e.name == "true" || e.name == "false" || e.name == "none" || e.name == "True" || e.name == "False" ||
          e.name == "None")
        fail(cur(), "can't assign to '" + e.name + "'");
    };
    if (target->kind == EK::Tuple) {
      for (auto& x : target->args) check(*x);
    } else {
      check(*target);
    }
    return target;
  }

  // ---- expressions

  bool is_tuple_end(const std::vector<const char*>& extra_end) const {
    if (cur().type == TT::VarEnd || cur().type == TT::BlockEnd || is_op(")")) return true;
    return at_end_tokens(extra_end);
  }

  ExprP parse_tuple(bool simplified, bool with_condexpr, const std::vector<const char*>& extra_end,
                    bool explicit_parens) {
    Token start = cur();
    std::vector<ExprP> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      if (simplified)
        args.push_back(parse_primary());
      else
        args.push_back(parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail(cur(), "expected an expression, got '" + describe(cur()) + "'");
    }
    auto n = node(EK::Tuple, start);
    n->args = std::move(args);
    return n;
  }

  ExprP parse_expression(bool with_condexpr) {
    Depth d(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprP parse_condexpr() {
    ExprP expr1 = parse_or();
    while (is_name("if")) {
      Token t = next();
      auto n = node(EK::CondExpr, t);
      n->a = parse_or();
      if (skip_name("else")) n->c = parse_condexpr();
      n->b = std::move(expr1);
      expr1 = std::move(n);
    }
    return expr1;
  }

  ExprP parse_or() {
    ExprP left = parse_and();
    while (is_name("or")) {
      Token t = next();
      auto n = node(EK::Or, t);
      n->a = std::move(left);
      n->b = parse_and();
      left = std::move(n);
    }
    return left;
  }

  ExprP parse_and() {
    ExprP left = parse_not();
    while (is_name("and")) {
      Token t = next();
      auto n = node(EK::And, t);
      n->a = std::move(left);
      n->b = parse_not();
      left = std::move(n);
    }
    return left;
  }

  ExprP parse_not() {
    if (is_name("not")) {
      Depth d(*this);
      Token t = next();
      auto n = node(EK::Not, t);
      n->a = parse_not();
      return n;
    }
    return parse_compare();
  }

  ExprP parse_compare() {
    Token start = cur();
    ExprP expr = parse_math1();
    ExprP cmp;
    while (true) {
      std::string op;
      if (cur().type == TT::Op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                   cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        op = next().value;
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && look().type == TT::Name && look().value == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(EK::Compare, start);
        cmp->a = std::move(expr);
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(expr);
  }

  ExprP binary(const std::string& op, ExprP l, ExprP r, const Token& t) {
    auto n = node(EK::Binary, t);
    n->name = op;
    n->a = std::move(l);
    n->b = std::move(r);
    return n;
  }

  ExprP parse_math1() {
    ExprP left = parse_concat();
    while (is_op("+") || is_op("-")) {
      Token t = next();
      left = binary(t.value, std::move(left), parse_concat(), t);
    }
    return left;
  }

  ExprP parse_concat() {
    Token start = cur();
    ExprP first = parse_math2();
    if (!is_op("~")) return first;
    auto n = node(EK::Concat, start);
    n->args.push_back(std::move(first));
    while (skip_op("~")) n->args.push_back(parse_math2());
    return n;
  }

  ExprP parse_math2() {
    ExprP left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      Token t = next();
      left = binary(t.value, std::move(left), parse_pow(), t);
    }
    return left;
  }

  ExprP parse_pow() {
    ExprP left = parse_unary(true);
    while (is_op("**")) {
      Token t = next();
      left = binary("**", std::move(left), parse_unary(true), t);
    }
    return left;
  }

  ExprP parse_unary(bool with_filter) {
    Depth d(*this);
    ExprP n;
    if (is_op("-") || is_op("+")) {
      Token t = next();
      n = node(t.value == "-" ? EK::Neg : EK::Pos, t);
      n->a = parse_unary(false);
    } else {
      n = parse_primary();
    }
    n = parse_postfix(std::move(n));
    if (with_filter) n = parse_filter_expr(std::move(n));
    return n;
  }

  ExprP parse_primary() {
    Depth d(*this);
    const Token& t = cur();
    if (t.type == TT::Name) {
      Token tok = next();
      auto n = node(EK::Const, tok);
      if (tok.value == "true" || tok.value == "True") {
        n->value = Val::boolean(true);
      } else if (tok.value == "false" || tok.value == "False") {
        n->value = Val::boolean(false);
      } else if (tok.value == "none" || tok.value == "None") {
        n->value = Val::none();
      } else {
        n->kind = EK::Name;
        n->name = tok.value;
        if (is_unsupported_global(tok.value)) fail(tok, "unsupported global '" + tok.value + "'");
        if (!macro_stack_.empty()) {
          MacroDef* m = macro_stack_.back();
          if (tok.value == "varargs") m->uses_varargs = true;
          if (tok.value == "kwargs") m->uses_kwargs = true;
          if (tok.value == "caller") m->uses_caller = true;
        }
      }
      return n;
    }
    if (t.type == TT::String) {
      Token tok = next();
      auto n = node(EK::Const, tok);
      std::string s = tok.value;
      while (cur().type == TT::String) s += next().value;
      n->value = Val::str(std::move(s));
      return n;
    }
    if (t.type == TT::Int || t.type == TT::Float) {
      Token tok = next();
      auto n = node(EK::Const, tok);
      n->value = tok.type == TT::Int ? Val::integer(tok.ival) : Val::real(tok.fval);
      return n;
    }
    if (is_op("(")) {
      next();
      ExprP n = parse_tuple(false, true, {}, true);
      expect_op(")");
      return n;
    }
    if (is_op("[")) {
      Token tok = next();
      auto n = node(EK::ListLit, tok);
      while (!is_op("]")) {
        if (!n->args.empty()) expect_op(",");
        if (is_op("]")) break;
        n->args.push_back(parse_expression(true));
      }
      expect_op("]");
      return n;
    }
    if (is_op("{")) {
      Token tok = next();
      auto n = node(EK::DictLit, tok);
      while (!is_op("}")) {
        if (!n->args.empty()) expect_op(",");
        if (is_op("}")) break;
        n->args.push_back(parse_expression(true));
        expect_op(":");
        n->args.push_back(parse_expression(true));
      }
      expect_op("}");
      return n;
    }
    fail(t, "unexpected '" + describe(t) + "'");
  }

  ExprP parse_postfix(ExprP n) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        n = parse_subscript(std::move(n));
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        break;
      }
    }
    return n;
  }

  ExprP parse_filter_expr(ExprP n) {
    while (true) {
      if (is_op("|")) {
        n = parse_filter(std::move(n), false);
      } else if (is_name("is")) {
        n = parse_test(std::move(n));
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        break;
      }
    }
    return n;
  }

  ExprP parse_subscript(ExprP obj) {
    Token t = next();
    if (t.value == ".") {
      Token a = next();
      if (a.type == TT::Name) {
        auto n = node(EK::GetAttr, a);
        n->name = a.value;
        n->a = std::move(obj);
        return n;
      }
      if (a.type != TT::Int) fail(a, "expected name or number after '.'");
      auto n = node(EK::GetItem, a);
      n->a = std::move(obj);
      n->b = node(EK::Const, a);
      n->b->value = Val::integer(a.ival);
      return n;
    }
    std::vector<ExprP> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto n = node(EK::GetItem, t);
    n->a = std::move(obj);
    if (args.size() == 1) {
      n->b = std::move(args[0]);
    } else {
      n->b = node(EK::Tuple, t);
      n->b->args = std::move(args);
    }
    return n;
  }

  ExprP parse_subscribed() {
    Token t = cur();
    std::vector<ExprP> parts;
    if (is_op(":")) {
      next();
      parts.emplace_back();
    } else {
      ExprP e = parse_expression(true);
      if (!is_op(":")) return e;
      next();
      parts.push_back(std::move(e));
    }
    if (is_op(":") || is_op("]") || is_op(","))
      parts.emplace_back();
    else
      parts.push_back(parse_expression(true));
    if (is_op(":")) {
      next();
      if (is_op("]") || is_op(","))
        parts.emplace_back();
      else
        parts.push_back(parse_expression(true));
    } else {
      parts.emplace_back();
    }
    auto n = node(EK::Slice, t);
    n->args = std::move(parts);
    return n;
  }

  void parse_call_args(Expr& n) {
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail(cur(), "unsupported: *args / **kwargs in calls");
      if (cur().type == TT::Name && look().type == TT::Op && look().value == "=") {
        std::string key = next().value;
        next();
        n.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!n.kwargs.empty()) fail(cur(), "invalid argument syntax: positional argument after keyword argument");
        n.args.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprP parse_call(ExprP callee) {
    Token t = cur();
    auto n = node(EK::Call, t);
    if (callee->kind == EK::GetAttr && !is_supported_method(callee->name))
      fail(t, "unsupported method '" + callee->name + "()'");
    n->a = std::move(callee);
    parse_call_args(*n);
    return n;
  }

  ExprP parse_filter(ExprP input, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      Token t = cur();
      std::string fname = expect_name();
      while (is_op(".")) {
        next();
        fname += "." + expect_name();
      }
      auto n = node(EK::Filter, t);
      n->name = fname;
      n->fn = find_filter(fname);
      if (!n->fn) fail(t, "unsupported filter '" + fname + "'");
      if (is_op("(")) parse_call_args(*n);
      n->a = std::move(input);
      input = std::move(n);
    }
    return input;
  }

  ExprP parse_test(ExprP input) {
    next();  // 'is'
    bool negated = skip_name("not");
    Token t = cur();
    std::string tname = expect_name();
    while (is_op(".")) {
      next();
      tname += "." + expect_name();
    }
    auto n = node(EK::Test, t);
    n->name = tname;
    n->fn = find_test(tname);
    if (!n->fn) fail(t, "unsupported test '" + tname + "'");
    if (is_op("(")) {
      parse_call_args(*n);
    } else if ((cur().type == TT::Name || cur().type == TT::String || cur().type == TT::Int ||
                cur().type == TT::Float || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail(cur(), "you cannot chain multiple tests with 'is'");
      n->args.push_back(parse_postfix(parse_primary()));
    }
    n->a = std::move(input);
    if (!negated) return n;
    auto no = node(EK::Not, t);
    no->a = std::move(n);
    return no;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  const std::string& name_;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<MacroDef*> macro_stack_;
};

}  // namespace

std::shared_ptr<Program> parse_template(const std::string& source, const std::string& name) {
  Lexer lexer(source, name);
  Parser parser(lexer.run(), name);
  auto prog = std::make_shared<Program>();
  prog->name = name;
  prog->body = parser.parse_all();
  return prog;
}

}  // namespace ft::jinja::detail
