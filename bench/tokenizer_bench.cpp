// Tokenizer throughput: encodes the text field(s) of every JSONL line and prints tokens/s.
//   bench_tokenizer FILE.jsonl TOKENIZER [threads] [--dump IDS.jsonl]
// TOKENIZER is a tokenizer.json, tekken.json or tiktoken file (picked by content). Text fields: "text", "prompt",
// "completion", "content" (also inside "messages"). Counterpart: bench/tokenizer_bench.py (HF tokenizers).
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "tokenizer/text_tokenizer.h"
#include "util/error.h"

namespace {

void collect(const nlohmann::json& j, std::vector<std::string>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      if (it.value().is_string() && (k == "text" || k == "prompt" || k == "completion" || k == "content")) {
        out.push_back(it.value().get<std::string>());
      } else if (it.value().is_structured()) {
        collect(it.value(), out);
      }
    }
  } else if (j.is_array()) {
    for (const auto& v : j) collect(v, out);
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s FILE.jsonl TOKENIZER [threads]\n", argv[0]);
    return 2;
  }
  char* end = nullptr;
  const int threads = argc > 3 ? static_cast<int>(std::strtol(argv[3], &end, 10)) : 0;
  if (argc > 3 && (end == argv[3] || *end != '\0' || threads < 0)) {
    std::fprintf(stderr, "threads must be a non-negative integer, got \"%s\"\n", argv[3]);
    return 2;
  }
  const std::string dump = argc > 5 && std::string(argv[4]) == "--dump" ? argv[5] : "";
  try {
    std::vector<std::string> texts;
    std::ifstream in(argv[1]);
    if (!in) throw ft::ConfigError(std::string(argv[1]) + ": cannot open");
    std::string line;
    size_t bytes = 0;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      collect(nlohmann::json::parse(line), texts);
    }
    for (const auto& t : texts) bytes += t.size();

    auto t0 = std::chrono::steady_clock::now();
    auto tok = ft::tok::load_text_tokenizer(argv[2]);
    const double load_s = seconds_since(t0);

    t0 = std::chrono::steady_clock::now();
    const auto ids = tok->encode_batch(texts, threads);
    const double enc_s = seconds_since(t0);
    size_t tokens = 0;
    for (const auto& v : ids) tokens += v.size();
    if (!dump.empty()) {  // one JSON array of ids per text, to diff against the reference
      std::ofstream out(dump);
      for (const auto& v : ids) out << nlohmann::json(v).dump() << "\n";
    }
    std::printf(
        "ft_tokenizer %s: %zu texts, %.1f MB, %zu tokens, load %.2f s, encode %.2f s on %d thread(s): "
        "%.0f tokens/s, %.1f MB/s\n",
        tok->kind().c_str(), texts.size(), static_cast<double>(bytes) / 1e6, tokens, load_s, enc_s, threads,
        static_cast<double>(tokens) / enc_s, static_cast<double>(bytes) / 1e6 / enc_s);
  } catch (const ft::Error& e) {
    std::fprintf(stderr, "error: %s\n  hint: %s\n", e.what(), e.hint().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
