#include "config/tree.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <string>

#include "util/error.h"
#include "util/fmt.h"
#include "util/utf8.h"

namespace ft::config {

std::string Origin::where() const {
  if (source.empty()) return "<default>";
  if (line == 0) return source;
  return source + ":" + std::to_string(line) + ":" + std::to_string(column);
}

const Node* Node::get(const std::string& key) const {
  if (kind != Kind::kMap) return nullptr;
  for (const auto& e : map) {
    if (e.key == key) return &e.value;
  }
  return nullptr;
}

Node* Node::get(const std::string& key) {
  return const_cast<Node*>(static_cast<const Node*>(this)->get(key));
}

std::string Node::describe() const {
  switch (kind) {
    case Kind::kNull:
      return "null";
    case Kind::kMap:
      return "a map";
    case Kind::kSeq:
      return "a list";
    case Kind::kScalar:
      break;
  }
  return "'" + scalar + "'";
}

namespace {

Origin origin_of(const YAML::Mark& mark, const std::string& source, const std::filesystem::path& base_dir) {
  Origin o;
  o.source = source;
  o.base_dir = base_dir;
  if (!mark.is_null()) {
    o.line = mark.line + 1;
    o.column = mark.column + 1;
  }
  return o;
}

}  // namespace

namespace {

constexpr int64_t kMaxValues = 1000000;

// YAML is Unicode text: a scalar or key with bytes that are not UTF-8 would not print back as the same value.
void require_utf8(const std::string& text, const Origin& where) {
  if (const auto bad = utf8::find_invalid_utf8(text)) {
    throw ConfigError(where.where() + ": not valid UTF-8 (byte " + std::to_string(*bad) + " of the value)",
                      "save the file as UTF-8");
  }
}

// The tree of `yaml`, spending one of `budget` per value: aliases are references in yaml-cpp, so nested anchors (a
// "billion laughs" file) would otherwise expand exponentially here.
Node convert(const YAML::Node& yaml, const std::string& source, const std::filesystem::path& base_dir,
             int64_t& budget) {
  if (--budget < 0) {
    throw ConfigError(source + ": the YAML expands to more than " + std::to_string(kMaxValues) +
                          " values (anchors referring to anchors?)",
                      "write the values out instead of nesting aliases");
  }
  Node n;
  n.origin = origin_of(yaml.Mark(), source, base_dir);
  switch (yaml.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      n.kind = Node::Kind::kNull;
      break;
    case YAML::NodeType::Scalar:
      n.kind = Node::Kind::kScalar;
      n.scalar = yaml.Scalar();
      require_utf8(n.scalar, n.origin);
      // yaml-cpp tags a quoted (or literal/folded) scalar "!" and a plain one "?".
      n.quoted = yaml.Tag() == "!";
      break;
    case YAML::NodeType::Sequence:
      n.kind = Node::Kind::kSeq;
      for (const auto& item : yaml) n.seq.push_back(convert(item, source, base_dir, budget));
      break;
    case YAML::NodeType::Map:
      n.kind = Node::Kind::kMap;
      for (const auto& kv : yaml) {
        Entry e;
        e.key = kv.first.Scalar();
        e.key_origin = origin_of(kv.first.Mark(), source, base_dir);
        require_utf8(e.key, e.key_origin);
        e.value = convert(kv.second, source, base_dir, budget);
        // A key with nothing after it has no mark of its own: point at the key.
        if (e.value.kind == Node::Kind::kNull && e.value.origin.line == 0) e.value.origin = e.key_origin;
        // Most YAML readers let the later of two equal keys win without a word; a config that says a setting twice
        // more likely holds a mistake (a pasted section, a second `train:`), so it is refused.
        for (const Entry& earlier : n.map) {
          if (earlier.key != e.key) continue;
          throw ConfigError(fmt::format("{}: duplicate key '{}' (first at line {})", e.key_origin.where(), e.key,
                                        earlier.key_origin.line),
                            "keep one of the two (within a map, each key once)");
        }
        n.map.push_back(std::move(e));
      }
      break;
  }
  return n;
}

}  // namespace

Node from_yaml(const YAML::Node& yaml, const std::string& source, const std::filesystem::path& base_dir) {
  int64_t budget = kMaxValues;
  return convert(yaml, source, base_dir, budget);
}

void merge(Node& into, const Node& over) {
  if (into.kind == Node::Kind::kMap && over.kind == Node::Kind::kNull) return;  // `section:` alone keeps it
  if (into.kind != Node::Kind::kMap || over.kind != Node::Kind::kMap) {
    into = over;
    return;
  }
  for (const auto& e : over.map) {
    if (Node* existing = into.get(e.key)) {
      merge(*existing, e.value);
    } else {
      into.map.push_back(e);
    }
  }
}

void set_path(Node& root, const std::vector<std::string>& path, Node value) {
  Node* cur = &root;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    if (cur->kind != Node::Kind::kMap) {
      *cur = Node{};
      cur->kind = Node::Kind::kMap;
      cur->origin = value.origin;
    }
    Node* next = cur->get(path[i]);
    if (next == nullptr) {
      Entry e;
      e.key = path[i];
      e.key_origin = value.origin;
      e.value.kind = Node::Kind::kMap;
      e.value.origin = value.origin;
      cur->map.push_back(std::move(e));
      next = &cur->map.back().value;
    }
    cur = next;
  }
  if (cur->kind != Node::Kind::kMap) {
    *cur = Node{};
    cur->kind = Node::Kind::kMap;
    cur->origin = value.origin;
  }
  const Origin key_origin = value.origin;
  if (Node* existing = cur->get(path.back())) {
    // Overrides replace values, but a map given on the command line merges like a later file's map.
    merge(*existing, value);
    return;
  }
  Entry e;
  e.key = path.back();
  e.key_origin = key_origin;
  e.value = std::move(value);
  cur->map.push_back(std::move(e));
}

std::vector<std::string> split_path(const std::string& dotted) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = dotted.find('.', start);
    parts.push_back(dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

std::string yaml_syntax_error(const YAML::ParserException& e, const std::filesystem::path& file) {
  std::string message = "YAML syntax error: " + e.msg;
  std::ifstream in(file);
  std::string line;
  for (int n = 0; n <= e.mark.line && std::getline(in, line); ++n) {
    if (n + 1 < e.mark.line) continue;
    const std::string indent = line.substr(0, line.find_first_not_of(" \t"));
    if (indent.find('\t') != std::string::npos) {
      return message + fmt::format(" (line {} indents with a tab: YAML indents with spaces only)", n + 1);
    }
  }
  return message;
}

Node load_yaml_file(const std::filesystem::path& file, const std::filesystem::path& base_dir) {
  const std::vector<YAML::Node> docs = YAML::LoadAllFromFile(file.string());
  if (docs.size() > 1) {
    Origin at = origin_of(docs[1].Mark(), file.string(), base_dir);
    throw ConfigError(
        fmt::format("{}: the file holds {} YAML documents (separated by ---); it must be one", at.where(), docs.size()),
        "keep one document (a config or sweep per file)");
  }
  return from_yaml(docs.empty() ? YAML::Node() : docs.front(), file.string(), base_dir);
}

}  // namespace ft::config
