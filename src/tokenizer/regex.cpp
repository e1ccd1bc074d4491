#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "tokenizer/unicode.h"

namespace ft::tok {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

namespace {

// Per-thread match state: match data and a JIT stack large enough for long whitespace runs under lookaheads
// like `\s+(?!\S)`. Shared by all patterns of a thread, so encode_batch's workers never contend.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(16, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(size_t{64} << 10, size_t{16} << 20, nullptr);
    if (context != nullptr && stack != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    if (stack != nullptr) pcre2_jit_stack_free(stack);
    if (context != nullptr) pcre2_match_context_free(context);
    if (data != nullptr) pcre2_match_data_free(data);
  }
  ThreadMatchState(const ThreadMatchState&) = delete;
  ThreadMatchState& operator=(const ThreadMatchState&) = delete;
};

ThreadMatchState& match_state() {
  thread_local ThreadMatchState state;
  return state;
}

// The references (Oniguruma in tokenizers, Rust's regex in tiktoken) define \s as White_Space and \w as
// Alphabetic|M|Nd|Pc|Join_Control (UTS #18); PCRE2's UCP \s leaves out U+0085 and its \w is L|N|_. Rewrite
// those escapes so the classes agree. (\W inside a bracket class has no union form and is left alone.)
std::string translate(const std::string& p) {
  static const char* kWord = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control})";
  static const char* kSpace = R"(\s\x{85})";
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 'w' || e == 's') {
        const char* body = e == 'w' ? kWord : kSpace;
        out += in_class ? std::string(body) : "[" + std::string(body) + "]";
      } else if ((e == 'W' || e == 'S') && !in_class) {
        out += "[^" + std::string(e == 'W' ? kWord : kSpace) + "]";
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);  // a leading ] is literal
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& pattern) : pattern_(pattern), code_(std::make_unique<Code>()) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  const std::string translated = translate(pattern);
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &offset, nullptr);
  if (code_->code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    throw RegexError("invalid regular expression /" + pattern + "/ at offset " + std::to_string(offset) + ": " +
                     reinterpret_cast<const char*>(buf));
  }
  // JIT is an optimisation only: a platform without it falls back to the interpreter with identical results.
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;

void Regex::find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const {
  ThreadMatchState& st = match_state();
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t pos = 0;
  while (pos <= subject.size()) {
    const int rc = pcre2_match(code_->code, s, subject.size(), pos, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(rc, buf, sizeof(buf));
      throw RegexError("regular expression /" + pattern_ + "/ failed: " + reinterpret_cast<const char*>(buf));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t start = ov[0], end = ov[1];
    out.emplace_back(start, end);
    if (end > start) {
      pos = end;
    } else {
      if (end >= subject.size()) break;
      pos = end + unicode::utf8_len(static_cast<unsigned char>(subject[end]));
    }
  }
}

Pattern Pattern::literal(std::string text) {
  Pattern p;
  p.literal_ = std::move(text);
  return p;
}

Pattern Pattern::regex(const std::string& pattern) {
  Pattern p;
  p.regex_ = std::make_shared<Regex>(pattern);
  return p;
}

void Pattern::find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const {
  if (regex_) {
    regex_->find_all(subject, out);
    return;
  }
  if (literal_.empty()) return;
  size_t pos = 0;
  while ((pos = subject.find(literal_, pos)) != std::string_view::npos) {
    out.emplace_back(pos, pos + literal_.size());
    pos += literal_.size();
  }
}

std::string Pattern::replace_all(std::string_view subject, std::string_view content) const {
  std::vector<std::pair<size_t, size_t>> matches;
  find_all(subject, matches);
  if (matches.empty()) return std::string(subject);
  std::string out;
  out.reserve(subject.size());
  size_t prev = 0;
  for (const auto& [s, e] : matches) {
    out.append(subject.data() + prev, s - prev);
    out.append(content);
    prev = e;
  }
  out.append(subject.data() + prev, subject.size() - prev);
  return out;
}

}  // namespace ft::tok
