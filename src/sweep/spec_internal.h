// Internals shared by the sweep file's translation units (spec.cpp, spec_read.cpp, spec_sections.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/tree.h"
#include "sweep/spec.h"

namespace ft::sweep::detail {

// The type of a config key's value as the sweep sees it.
enum class Type { kBool, kInt, kDouble, kString, kStrings, kNumbers, kMaps, kPrompts, kSection };

// What a value of type `t` must be, for messages ("an integer", "a list of strings", ...) (spec_read.cpp).
const char* expected(Type t);
// An unquoted scalar, as the config loader's binding wants booleans and numbers (spec_read.cpp).
bool plain(const config::Node& n);

// The problems found in a sweep file, thrown as one ft::ConfigError in file order (spec_read.cpp).
class Problems {
 public:
  void add(const config::Origin& origin, const std::string& key, const std::string& message);
  void throw_if_any() const;

 private:
  struct Item {
    int line = 0, column = 0;
    std::string text;
  };
  std::vector<Item> items_;
};

// Reads the sweep file's tree into a SweepSpec, checking every key and value: the top level and the checks
// (spec_read.cpp), the sections set:, grid:, list:, random: and median_stop: (spec_sections.cpp).
class Reader {
 public:
  Reader(SweepSpec& spec, Problems& problems, std::filesystem::path base_dir)
      : spec_(spec), problems_(problems), base_dir_(std::move(base_dir)) {}

  void read(const config::Node& root);

 private:
  static std::string join(const std::vector<std::string>& words);
  bool string_value(const config::Node& v, const std::string& key, std::string& out);
  bool int_value(const config::Node& v, const std::string& key, int64_t min, int64_t& out);
  void read_metric(const config::Node& v);
  std::optional<Type> config_key(const std::string& key, const config::Origin& origin, const std::string& section);
  static std::string first_key_of(const std::string& section);
  bool typed_value(const config::Node& v, Type t, const std::string& shown);
  bool map_section(const config::Node& v, const std::string& key);

  void read_set(const config::Node& v);
  void read_grid(const config::Node& v);
  void read_list(const config::Node& v);
  void read_random(const config::Node& v);
  std::optional<RandomParam> read_param(const std::string& key, const config::Node& v, Type type,
                                        const std::string& shown);
  void read_median_stop(const config::Node& v);

  SweepSpec& spec_;
  Problems& problems_;
  std::filesystem::path base_dir_;
  bool had_trial_section_ = false;
  std::map<std::string, std::pair<std::string, std::string>> owners_;  // key -> (section, where)
};

}  // namespace ft::sweep::detail
