// Internals shared by the loader's translation units (not for use outside src/config).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "config/config.h"
#include "config/loader.h"
#include "config/tree.h"

namespace ft::config::detail {

// A section of the schema: a struct whose visit() names its keys (Config's sections, a data source, a prompt turn).
struct AnyVisitor {
  template <class... A>
  void operator()(A&&...) {}
};
template <class T, class = void>
struct is_section : std::false_type {};
template <class T>
struct is_section<T, std::void_t<decltype(std::declval<T&>().visit(std::declval<AnyVisitor&>()))>> : std::true_type {};
template <class T>
inline constexpr bool is_section_v = is_section<T>::value;

// Collects errors as "WHERE: KEY: message" lines.
class Errors {
 public:
  // `fallback`: where errors about values that kept their default point (the config file, no position).
  explicit Errors(Origin fallback) : fallback_(std::move(fallback)) {}
  void add(const Origin& origin, const std::string& key, const std::string& message);
  // Later errors about `key` are dropped: its value could not be computed, so they would only echo the first.
  void silence(const std::string& key) { silenced_.push_back(key); }
  bool empty() const { return items_.empty(); }
  // Throws ft::ConfigError listing every error, file positions in file and line order, when there is any.
  void throw_if_any() const;
  // The errors in that order.
  std::vector<Problem> problems() const;

 private:
  struct Item {
    std::string source;  // file or override text, for ordering
    int line = 0, column = 0;
    Problem problem;
  };
  std::vector<Item> sorted() const;
  Origin fallback_;  // used for values that kept their default (no position to point at)
  std::vector<Item> items_;
  std::vector<std::string> silenced_;
};

// Binds `root` (defaults merged with the files and overrides, interpolated) into `config`. Reports unknown keys
// and wrong types to `errors`; records where each value came from in `locations`; makes relative file paths
// absolute against the directory of the file that set them.
void bind(const Node& root, Config& config, std::map<std::string, Origin>& locations, Errors& errors);

// Checks ranges, enums, conflicts and referenced files. `where(key)` gives the location to report.
void validate(const Config& config, const std::map<std::string, Origin>& locations, const Origin& fallback,
              Errors& errors);

// "invalid value 'v' (expected one of: a, b); did you mean 'a'?": the message for a value outside its choices.
std::string invalid_choice(const std::string& value, const std::vector<std::string>& choices);

// Shortest decimal text that parses back to exactly `v`.
std::string format_double(double v);

// to_yaml with or without escaping "${" as "$${" (the built-in defaults keep their references live).
std::string emit_yaml(const Config& config, bool escape_interpolation);

}  // namespace ft::config::detail
