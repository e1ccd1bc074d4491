// docs/configuration.md documents every key with its type and default, and the descriptions are config.h's
// comments: the tables are compared with the structs (through to_yaml) so docs and code cannot drift.
#include <yaml-cpp/yaml.h>

#include <map>
#include <sstream>
#include <type_traits>

#include "config/resume_keys.h"
#include "config_test_util.h"

namespace ft::test {
namespace {

struct Row {
  std::string type;
  std::string default_text;
  std::string description;
};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(' ');
  const size_t e = s.find_last_not_of(' ');
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string unquote_code(const std::string& cell) {
  const std::string t = trim(cell);
  return t.size() >= 2 && t.front() == '`' && t.back() == '`' ? t.substr(1, t.size() - 2) : t;
}

// Table rows "| `key` | type | `default` | description |"; "\|" inside a cell is a literal bar.
std::map<std::string, Row> read_docs_tables(const std::string& text) {
  std::map<std::string, Row> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::string cell;
    for (size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
        cell += '|';
        ++i;
      } else if (line[i] == '|') {
        cells.push_back(cell);
        cell.clear();
      } else {
        cell += line[i];
      }
    }
    EXPECT_EQ(cells.size(), 4u) << line;
    if (cells.size() != 4) continue;
    const std::string key = unquote_code(cells[0]);
    EXPECT_EQ(rows.count(key), 0u) << "documented twice: " << key;
    rows[key] = Row{trim(cells[1]), unquote_code(cells[2]), trim(cells[3])};
  }
  return rows;
}

// Leaf values of printed YAML as text: scalars as printed ("" for empty), lists as "[a, b]".
void flatten(const YAML::Node& n, const std::string& path, std::map<std::string, std::string>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n) flatten(kv.second, path.empty() ? kv.first.Scalar() : path + "." + kv.first.Scalar(), out);
  } else if (n.IsSequence() && n.size() > 0 && n[0].IsMap()) {
    out[path] = "[]";  // the default list of sources is empty; its element keys come from the one added below
    flatten(n[0], path + "[]", out);
  } else if (n.IsSequence()) {
    std::string s = "[";
    for (size_t i = 0; i < n.size(); ++i) s += (i ? ", " : "") + n[i].Scalar();
    out[path] = s + "]";
  } else {
    out[path] = n.Scalar().empty() ? "\"\"" : n.Scalar();
  }
}

class TypeNames {
 public:
  TypeNames(std::map<std::string, std::string>& out, std::string prefix,
            std::map<std::string, std::vector<std::string>>* values)
      : out_(out), prefix_(std::move(prefix)), values_(values) {}
  template <class T>
  void operator()(const char* key, T& field, OnResume = OnResume::kMayChange) {
    const std::string path = prefix_ + key;
    if constexpr (std::is_same_v<T, bool>) out_[path] = "bool";
    else if constexpr (std::is_same_v<T, int64_t>) out_[path] = "int";
    else if constexpr (std::is_same_v<T, double>) out_[path] = "float";
    else if constexpr (std::is_same_v<T, std::string> || is_open_setting_v<T>) out_[path] = "string";
    else if constexpr (is_setting_v<T>) {
      out_[path] = "enum";
      std::vector<std::string> names;
      for (const auto& e : EnumTable<T>::entries) names.emplace_back(e.name);
      (*values_)[path] = names;
    }
    else if constexpr (std::is_same_v<T, std::vector<std::string>>) out_[path] = "list[string]";
    else if constexpr (std::is_same_v<T, std::vector<double>>) out_[path] = "list[float]";
    else if constexpr (std::is_same_v<T, std::vector<EvalPrompt>>) out_[path] = "list[prompt]";
    else if constexpr (std::is_same_v<T, std::vector<DataSource>>) {
      out_[path] = "list[source]";
      DataSource element;
      TypeNames sub(out_, path + "[].", values_);
      element.visit(sub);
    } else {
      TypeNames sub(out_, path + ".", values_);
      field.visit(sub);
    }
  }

 private:
  std::map<std::string, std::string>& out_;
  std::string prefix_;
  std::map<std::string, std::vector<std::string>>* values_;  // enum keys: their table's names
};

TEST(ConfigDocs, EveryKeyDocumentedWithItsTypeDefaultAndComment) {
  const auto rows = read_docs_tables(read_file(source_dir() / "docs" / "configuration.md"));
  const std::string header = read_file(source_dir() / "src" / "config" / "config.h");

  Config with_sources;
  with_sources.data.train.emplace_back();
  with_sources.data.eval.emplace_back();
  std::map<std::string, std::string> defaults;
  flatten(YAML::Load(config::to_yaml(with_sources)), "", defaults);
  std::map<std::string, std::string> types;
  std::map<std::string, std::vector<std::string>> enum_values;
  TypeNames names(types, "", &enum_values);
  with_sources.visit(names);

  for (const auto& [key, value] : defaults) {
    const auto it = rows.find(key);
    if (it == rows.end()) {
      ADD_FAILURE() << "docs/configuration.md has no row for " << key;
      continue;
    }
    std::string shown = value;  // to_yaml escapes the default's live reference as $${...}
    for (size_t i = shown.find("$${"); i != std::string::npos; i = shown.find("$${", i)) shown.erase(i, 1);
    EXPECT_EQ(it->second.default_text, shown) << key;
    EXPECT_EQ(it->second.type, types[key]) << key;
    EXPECT_FALSE(it->second.description.empty()) << key;
    // An enum's description lists every name of its table (config/settings.h), so a new value reaches the docs.
    for (const auto& name : enum_values[key]) {
      EXPECT_NE((" " + it->second.description + " ").find(name), std::string::npos)
          << key << ": the description does not list '" << name << "'";
    }
    EXPECT_NE(header.find("// " + it->second.description + "\n"), std::string::npos)
        << key << ": the description is not config.h's comment: " << it->second.description;
  }
  for (const auto& [key, row] : rows) EXPECT_EQ(defaults.count(key), 1u) << "documented but not a key: " << key;
  // Every known key that holds a value is covered (sections are headings, not rows).
  size_t leaves = 0;
  for (const auto& k : config::known_keys()) leaves += types.count(k) && rows.count(k) ? 1 : 0;
  EXPECT_EQ(leaves, rows.size());
}

// The keys a resumed run must keep are the ones config.h marks kMustMatch, in the order docs/configuration.md lists
// them.
TEST(ConfigDocs, TheResumeKeysListedAreTheMarkedOnes) {
  const std::string text = read_file(source_dir() / "docs" / "configuration.md");
  const std::string intro = "A resumed run may change any setting but these";
  const size_t start = text.find(intro);
  ASSERT_NE(start, std::string::npos) << "docs/configuration.md no longer lists the resume keys";
  const size_t list = text.find("):\n", start);
  const size_t end = text.find(".\n", list);
  ASSERT_TRUE(list != std::string::npos && end != std::string::npos);
  std::vector<std::string> listed;
  for (size_t b = text.find('`', list); b != std::string::npos && b < end; b = text.find('`', b + 1)) {
    const size_t e = text.find('`', b + 1);
    listed.push_back(text.substr(b + 1, e - b - 1));
    b = e;
  }
  EXPECT_EQ(listed, config::must_match_keys());
}

}  // namespace
}  // namespace ft::test
