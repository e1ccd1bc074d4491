// Integers read from JSON files a crash, a disk or a user may have damaged (checkpoint state, cache metadata).
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

namespace ft {

// nlohmann's get<T>() converts a JSON float to an integer with a plain cast, which is undefined behaviour once the
// value is out of T's range (the data fuzzer found `"epoch": 1e300` in a loader state). This accepts JSON integers
// that fit T and nothing else; anything else throws nlohmann's type_error 302, as get<T>() does for a string, so
// callers that already turn nlohmann's exceptions into errors with a hint need no new catch.
// `name` (the key, for the message) may be empty.
template <typename T>
T json_integer(const nlohmann::json& v, const std::string& name = "") {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  using Limits = std::numeric_limits<T>;
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(Limits::max())) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const auto i = v.get<int64_t>();
    const bool fits = std::is_signed_v<T>
                          ? (i >= static_cast<int64_t>(Limits::min()) &&
                             (sizeof(T) >= sizeof(int64_t) || i <= static_cast<int64_t>(Limits::max())))
                          : (i >= 0 && static_cast<uint64_t>(i) <= static_cast<uint64_t>(Limits::max()));
    if (fits) return static_cast<T>(i);
  }
  throw nlohmann::json::type_error::create(302,
                                           (name.empty() ? "" : name + ": ") + "expected an integer from " +
                                               std::to_string(Limits::min()) + " to " + std::to_string(Limits::max()) +
                                               ", found " + v.dump(),
                                           &v);
}

// The integer at obj[key]; a missing key throws nlohmann's out_of_range, as at() does.
template <typename T>
T json_integer_at(const nlohmann::json& obj, const std::string& key) {
  return json_integer<T>(obj.at(key), key);
}

}  // namespace ft
