// Helpers shared by the builtins of ft::jinja (builtins, strings, filters, filters_scalar, predicates, methods).
#pragma once

#include "jinja/render.h"

namespace ft::jinja::detail {

// Call arguments (builtins.cpp).

// The argument at position idx, else the keyword argument `name` (nullptr: none); nullptr when absent.
const Val* arg(const CallArgs& a, size_t idx, const char* name);
// truthy() of that argument, dflt when absent.
bool arg_bool(const CallArgs& a, size_t idx, const char* name, bool dflt);
// That argument as an integer, dflt when absent or None; TypeErr when it is not an int.
int64_t arg_int(const CallArgs& a, size_t idx, const char* name, int64_t dflt);
// v's string; TypeErr "<what> must be str" when v is not one.
const std::string& need_str(const Val& v, const char* what);

// Python str helpers (strings.cpp); strings are UTF-8 and indexed by code point.

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

// Registries (filters.cpp, predicates.cpp): the filter or test of that name, nullptr when there is none.

const FilterEntry* filter_entry(const std::string& name);
const TestEntry* test_entry(const std::string& name);

// Filters on strings and numbers (filters_scalar.cpp), registered in filters.cpp; f_x is jinja2's filter x.

Val f_trim(Renderer&, const Val& v, CallArgs& a, int);       // trim(chars)
Val f_upper(Renderer&, const Val& v, CallArgs&, int);        // upper
Val f_lower(Renderer&, const Val& v, CallArgs&, int);        // lower
Val f_capitalize(Renderer&, const Val& v, CallArgs&, int);   // capitalize
Val f_title(Renderer&, const Val& v, CallArgs&, int);        // title
Val f_string(Renderer&, const Val& v, CallArgs&, int);       // string (keeps Markup)
Val f_safe(Renderer&, const Val& v, CallArgs&, int);         // safe
Val f_escape(Renderer&, const Val& v, CallArgs&, int);       // escape, e
Val f_forceescape(Renderer&, const Val& v, CallArgs&, int);  // forceescape
Val f_replace(Renderer&, const Val& v, CallArgs& a, int);    // replace(old, new, count)
Val f_int(Renderer&, const Val& v, CallArgs& a, int);        // int(default, base)
Val f_float(Renderer&, const Val& v, CallArgs& a, int);      // float(default)
Val f_abs(Renderer&, const Val& v, CallArgs&, int);          // abs
Val f_round(Renderer&, const Val& v, CallArgs& a, int);      // round(precision, method)
Val f_tojson(Renderer&, const Val& v, CallArgs& a, int);     // tojson as transformers defines it
Val f_indent(Renderer&, const Val& v, CallArgs& a, int);     // indent(width, first, blank)
Val f_wordcount(Renderer&, const Val& v, CallArgs&, int);    // wordcount
Val f_format(Renderer&, const Val& v, CallArgs& a, int);     // format (%-formatting)
Val f_center(Renderer&, const Val& v, CallArgs& a, int);     // center(width)

}  // namespace ft::jinja::detail
