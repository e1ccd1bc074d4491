#include "data/synth.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/file_writer.h"
#include "util/hash.h"

namespace ft::data {
namespace {

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + std::to_string(v[i]);
  return s;
}

int64_t uniform(SplitMix64& rng, int64_t lo, int64_t hi) {  // inclusive
  return lo + static_cast<int64_t>(rng.below(static_cast<uint64_t>(hi - lo + 1)));
}

std::vector<int64_t> random_list(SplitMix64& rng, int64_t max_value) {
  std::vector<int64_t> v(static_cast<size_t>(uniform(rng, 3, 7)));
  for (auto& x : v) x = uniform(rng, 0, max_value);
  return v;
}

std::string random_letters(SplitMix64& rng, int64_t lo, int64_t hi) {
  std::string s(static_cast<size_t>(uniform(rng, lo, hi)), 'a');
  for (auto& c : s) c = static_cast<char>('a' + rng.below(26));
  return s;
}

SynthSample one(const std::string& task, SplitMix64& rng) {
  if (task == "add") {
    const int64_t da = uniform(rng, 1, 4), db = uniform(rng, 1, 4);
    auto number = [&rng](int64_t digits) {
      int64_t lo = 1;
      for (int64_t i = 1; i < digits; ++i) lo *= 10;
      return uniform(rng, digits == 1 ? 0 : lo, lo * 10 - 1);
    };
    const int64_t a = number(da), b = number(db);
    return {"Add: " + std::to_string(a) + " + " + std::to_string(b) + "\nAnswer:", " " + std::to_string(a + b)};
  }
  if (task == "reverse") {
    auto v = random_list(rng, 9);
    const std::string p = "Reverse: " + join(v) + "\nAnswer:";
    std::reverse(v.begin(), v.end());
    return {p, " " + join(v)};
  }
  if (task == "sort") {
    auto v = random_list(rng, 99);
    const std::string p = "Sort: " + join(v) + "\nAnswer:";
    std::sort(v.begin(), v.end());
    return {p, " " + join(v)};
  }
  if (task == "copy") {
    const auto s = random_letters(rng, 3, 8);
    return {"Copy: " + s + "\nAnswer:", " " + s};
  }
  if (task == "upper") {
    const auto s = random_letters(rng, 3, 8);
    std::string u = s;
    for (auto& c : u) c = static_cast<char>(c - 'a' + 'A');
    return {"Uppercase: " + s + "\nAnswer:", " " + u};
  }
  throw ConfigError("unknown synthetic task '" + task + "'", "use add, reverse, sort, copy or upper");
}

}  // namespace

const std::vector<std::string>& synth_task_names() {
  static const std::vector<std::string> names = {"add", "reverse", "sort", "copy", "upper"};
  return names;
}

std::vector<SynthSample> synth_generate(const std::string& task, int64_t n, uint64_t seed) {
  if (n < 0) throw ConfigError("the number of synthetic samples must be >= 0");
  SplitMix64 rng(seed ^ hash_string(task));
  std::vector<SynthSample> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.push_back(one(task, rng));
  if (n == 0) one(task, rng);  // still validates the task name
  return out;
}

void write_synth_jsonl(const std::vector<SynthSample>& samples, const std::filesystem::path& path) {
  std::string text;
  for (const auto& s : samples)
    text += nlohmann::json{{"prompt", s.prompt}, {"completion", s.completion}}.dump() + "\n";
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  ft::write_file_atomic(path, text);
}

void write_synthetic(const std::string& task, int64_t n, uint64_t seed, const std::filesystem::path& path) {
  write_synth_jsonl(synth_generate(task, n, seed), path);
}

bool exact_match(std::string_view generated, std::string_view expected) {
  auto trim = [](std::string_view s) {
    const char* ws = " \t\n\r\f\v";
    const auto b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return std::string_view{};
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
  };
  return trim(generated) == trim(expected);
}

}  // namespace ft::data
