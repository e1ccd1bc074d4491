// The loader's working form of a YAML document: a plain tree whose every value remembers where it was written
// (file:line:column, or the command-line override), so errors and relative paths can point back at the source.
// yaml-cpp nodes are reference-counted views, awkward to merge safely; this tree is copied by value.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace YAML {
class ParserException;
class Node;
}

namespace ft::config {

// Where a value came from.
struct Origin {
  std::string source;             // YAML file path, "<override 'a.b=c'>", or empty for built-in defaults
  int line = 0;                   // 1-based; 0 = no position (overrides, defaults)
  int column = 0;                 // 1-based
  std::filesystem::path base_dir; // directory that relative file paths in this value resolve against; empty = none

  bool is_default() const { return source.empty(); }
  // "FILE:LINE:COL" for file values, the override text for overrides, "<default>" for defaults.
  std::string where() const;
};

struct Node;
struct Entry;

struct Node {
  enum class Kind { kNull, kScalar, kMap, kSeq };
  Kind kind = Kind::kNull;
  std::string scalar;        // kScalar: the text as written (after interpolation: resolved)
  bool quoted = false;       // kScalar: written in quotes, so always a string
  std::vector<Entry> map;    // kMap: entries in the order written
  std::vector<Node> seq;     // kSeq: elements
  Origin origin;             // where this value was written

  const Node* get(const std::string& key) const;
  Node* get(const std::string& key);
  // "map", "list", "null" or the scalar's text in quotes, for "got ..." in error messages.
  std::string describe() const;
};

struct Entry {
  std::string key;
  Origin key_origin;  // where the key itself was written (unknown-key errors point here)
  Node value;
};

// Converts a parsed yaml-cpp document; every node gets `source`, its mark and `base_dir`.
Node from_yaml(const YAML::Node& yaml, const std::string& source, const std::filesystem::path& base_dir);

// The tree of `file`'s one YAML document (kNull for an empty file). A second document (after ---), which yaml-cpp's
// LoadFile would drop without a word, is a ConfigError at its line; YAML::ParserException and YAML::BadFile pass.
Node load_yaml_file(const std::filesystem::path& file, const std::filesystem::path& base_dir);

// "YAML syntax error: " and yaml-cpp's message for a parse error in `file`, saying so when the line it points at (or
// the one before) indents with a tab, which YAML forbids and yaml-cpp reports as something else.
std::string yaml_syntax_error(const YAML::ParserException& e, const std::filesystem::path& file);

// Deep merge: maps merge key by key (recursively), anything else in `over` replaces what `into` holds.
void merge(Node& into, const Node& over);

// Sets the value at a dotted path, creating maps on the way (they take `value`'s origin). A path segment that
// runs through a non-map value replaces it with a map, as a later file would.
void set_path(Node& root, const std::vector<std::string>& path, Node value);

// Splits "a.b.c" into its parts; empty parts are kept (callers reject them).
std::vector<std::string> split_path(const std::string& dotted);

}  // namespace ft::config
