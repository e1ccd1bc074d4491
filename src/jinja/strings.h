// Strings of ft::jinja (internal): UTF-8 decoding and Python's character classes, and the Python str operations
// (strip, split, replace, case mapping, str.format) that methods and filters share; strings.cpp defines them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/value.h"

#include "util/utf8.h"

namespace ft::jinja::detail {

// UTF-8: strings are indexed by code point as Python does.

// Lenient decoding, as Python reads a template's bytes: an invalid byte becomes the Latin-1 code point.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
using ft::utf8::append_utf8;  // util/utf8.h
size_t utf8_length(std::string_view s);
bool is_ascii(std::string_view s);

// Python's character classes and case mapping.
bool py_isspace(char32_t c);
char32_t py_lower(char32_t c);
char32_t py_upper(char32_t c);
bool py_isupper(char32_t c);
bool py_islower(char32_t c);
bool py_isalpha(char32_t c);
bool py_isdigit(char32_t c);
bool py_isalnum(char32_t c);

// A padded, indented or repeated string of `count` pieces of `unit` bytes each: refused (TypeErr) when it would
// exceed `max_bytes` (the render's output limit), before anything is allocated.
void check_result_size(uint64_t count, uint64_t unit, size_t max_bytes);

// Python str operations.

// utf8_decode(s).
std::u32string U(const std::string& s);
// utf8_encode(s).
std::string S(const std::u32string& s);
// str.strip/lstrip/rstrip(chars): chars nullptr or None strips whitespace.
std::string strip(const std::string& s, const Val* chars, bool left, bool right);
// s with fn applied to every code point (py_lower, py_upper, ...).
std::string map_chars(const std::string& s, char32_t (*fn)(char32_t));
// Whether c is an upper- or lower-case letter.
bool is_cased(char32_t c);
// str.title().
std::string py_title(const std::string& s);
// str.capitalize().
std::string py_capitalize(const std::string& s);
// jinja2's title filter: words start after [-\s({\[<]+.
std::string jinja_title(const std::string& s);
// str.split/rsplit(sep, maxsplit): sepv nullptr or None splits on whitespace, maxsplit < 0 has no limit.
List split(const std::string& s, const Val* sepv, int64_t maxsplit, bool from_right);
// str.splitlines(keepends).
std::vector<std::string> splitlines(const std::string& s, bool keepends);
// str.replace(old, neu, count): count < 0 replaces all.
std::string replace(const std::string& s, const std::string& old, const std::string& neu, int64_t count);
// markupsafe's escape of &, <, >, " and '.
std::string html_escape(const std::string& s);
// Byte offset -> code point index.
int64_t cp_index(const std::string& s, size_t byte_off);
// str.format with {} / {0} / {name} fields (no format specs).
std::string str_format(const std::string& fmt, const CallArgs& a);

}  // namespace ft::jinja::detail
