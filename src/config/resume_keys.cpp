#include "config/resume_keys.h"

#include <type_traits>

#include "config/detail.h"

namespace ft::config {
namespace {

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};

// Any value of the schema as JSON (every type a key may have, so that a new mark needs no new case).
template <class T>
nlohmann::json to_json_value(T& field);

// A section's keys as a JSON object.
class ObjectWriter {
 public:
  explicit ObjectWriter(nlohmann::json& out) : out_(out) {}
  template <class T>
  void operator()(const char* key, T& field, OnResume = OnResume::kMayChange) {
    out_[key] = to_json_value(field);
  }

 private:
  nlohmann::json& out_;
};

template <class T>
nlohmann::json to_json_value(T& field) {
  if constexpr (is_setting_v<T> || is_open_setting_v<T>) {
    return setting_text(field);
  } else if constexpr (std::is_arithmetic_v<T> || std::is_same_v<T, std::string>) {
    return field;
  } else if constexpr (is_vector<T>::value) {
    nlohmann::json list = nlohmann::json::array();
    for (auto& element : field) list.push_back(to_json_value(element));
    return list;
  } else if constexpr (std::is_same_v<T, EvalPrompt>) {  // written as a string or as its turns
    return field.messages.empty() ? nlohmann::json(field.text) : to_json_value(field.messages);
  } else {
    static_assert(detail::is_section_v<T>, "a key of a type the schema does not have");
    nlohmann::json object = nlohmann::json::object();
    ObjectWriter writer(object);
    field.visit(writer);
    return object;
  }
}

// Walks the sections and calls `found(path, field)` for every marked key.
template <class Found>
class MarkFinder {
 public:
  MarkFinder(Found& found, std::string prefix) : found_(found), prefix_(std::move(prefix)) {}
  template <class T>
  void operator()(const char* key, T& field, OnResume on_resume = OnResume::kMayChange) {
    const std::string path = prefix_ + key;
    if (on_resume == OnResume::kMustMatch) {
      found_(path, field);
    } else if constexpr (detail::is_section_v<T>) {
      MarkFinder sub(found_, path + ".");
      field.visit(sub);
    }
  }

 private:
  Found& found_;
  std::string prefix_;
};

template <class Found>
void find_marks(Config& config, Found found) {
  MarkFinder<Found> finder(found, "");
  config.visit(finder);
}

}  // namespace

const std::vector<std::string>& must_match_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out;
    Config defaults;
    find_marks(defaults, [&](const std::string& path, auto&) { out.push_back(path); });
    return out;
  }();
  return keys;
}

nlohmann::json must_match_values(const Config& config) {
  Config copy = config;  // visit() takes its fields by non-const reference
  nlohmann::json values = nlohmann::json::object();
  find_marks(copy, [&](const std::string& path, auto& field) { values[path] = to_json_value(field); });
  return values;
}

}  // namespace ft::config
