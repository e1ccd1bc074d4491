#include "train/fingerprint.h"

#include <filesystem>
#include <nlohmann/json.hpp>

namespace ft::train {

bool same_fingerprint(const std::string& saved, const std::string& current) {
  if (saved == current) return true;
  auto a = nlohmann::json::parse(saved, nullptr, /*allow_exceptions=*/false);
  auto b = nlohmann::json::parse(current, nullptr, /*allow_exceptions=*/false);
  if (a.is_discarded() || b.is_discarded() || !a.is_object() || !b.is_object()) return false;
  const char* key = "data_sources";  // [[path, format, weight], ...]
  if (!a.contains(key) || !b.contains(key) || !a[key].is_array() || !b[key].is_array() ||
      a[key].size() != b[key].size()) {
    return false;
  }
  for (size_t i = 0; i < a[key].size(); ++i) {
    auto& sa = a[key][i];
    auto& sb = b[key][i];
    if (!sa.is_array() || !sb.is_array() || sa.empty() || sb.empty() || !sa[0].is_string() || !sb[0].is_string()) {
      return false;
    }
    std::error_code ec;
    const std::string pa = sa[0].get<std::string>(), pb = sb[0].get<std::string>();
    if (pa != pb && std::filesystem::equivalent(pa, pb, ec) && !ec) sa[0] = pb;  // the same file, named two ways
  }
  return a == b;
}

}  // namespace ft::train
