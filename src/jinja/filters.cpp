// The filters of ft::jinja by name (jinja2's names, aliases included): filters_seq.cpp and filters_text.cpp
// implement them; the parser looks names up here, so an unsupported filter fails when the template is parsed.
#include <unordered_map>

#include "jinja/filters.h"

namespace ft::jinja::detail {
namespace {

const std::unordered_map<std::string, FilterEntry>& filters() {
  static const std::unordered_map<std::string, FilterEntry> m = {
      {"length", {f_length}},
      {"count", {f_length}},
      {"first", {f_first}},
      {"last", {f_last}},
      {"join", {f_join}},
      {"default", {f_default}},
      {"d", {f_default}},
      {"trim", {f_trim}},
      {"upper", {f_upper}},
      {"lower", {f_lower}},
      {"capitalize", {f_capitalize}},
      {"title", {f_title}},
      {"string", {f_string}},
      {"safe", {f_safe}},
      {"e", {f_escape}},
      {"escape", {f_escape}},
      {"forceescape", {f_forceescape}},
      {"replace", {f_replace}},
      {"list", {f_list}},
      {"int", {f_int}},
      {"float", {f_float}},
      {"abs", {f_abs}},
      {"round", {f_round}},
      {"reverse", {f_reverse}},
      {"sort", {f_sort}},
      {"unique", {f_unique}},
      {"min", {f_min}},
      {"max", {f_max}},
      {"sum", {f_sum}},
      {"items", {f_items}},
      {"dictsort", {f_dictsort}},
      {"map", {f_map}},
      {"select", {f_select}},
      {"reject", {f_reject}},
      {"selectattr", {f_selectattr}},
      {"rejectattr", {f_rejectattr}},
      {"tojson", {f_tojson}},
      {"indent", {f_indent}},
      {"wordcount", {f_wordcount}},
      {"format", {f_format}},
      {"center", {f_center}},
  };
  return m;
}

}  // namespace

const FilterEntry* filter_entry(const std::string& name) {
  auto it = filters().find(name);
  return it == filters().end() ? nullptr : &it->second;
}

const void* find_filter(const std::string& name) {
  return filter_entry(name);
}

}  // namespace ft::jinja::detail
