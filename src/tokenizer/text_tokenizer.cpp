#include "tokenizer/text_tokenizer.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <fstream>
#include <mutex>
#include <thread>

#include "tokenizer/json_util.h"
#include "util/error.h"

namespace ft::tok {

std::vector<std::vector<int32_t>> TextTokenizer::encode_batch(const std::vector<std::string>& texts, int threads,
                                                              const EncodeOptions& opts) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  size_t n = threads > 0 ? static_cast<size_t>(threads) : std::max(1u, std::thread::hardware_concurrency());
  n = std::min(n, texts.size());
  if (n <= 1) {
    for (size_t i = 0; i < texts.size(); ++i) out[i] = encode(texts[i], opts);
    return out;
  }
  // Texts vary wildly in length, so workers pull small chunks instead of taking fixed slices.
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  const size_t chunk = std::max<size_t>(1, std::min<size_t>(64, texts.size() / (n * 16)));
  auto work = [&] {
    try {
      while (true) {
        const size_t begin = next.fetch_add(chunk);
        if (begin >= texts.size()) return;
        const size_t end = std::min(texts.size(), begin + chunk);
        for (size_t i = begin; i < end; ++i) out[i] = encode(texts[i], opts);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
      next = texts.size();
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  return out;
}

namespace {

bool looks_like_tiktoken_line(const std::string& line) {
  const size_t sp = line.find(' ');
  if (sp == std::string::npos || sp == 0 || sp + 1 >= line.size()) return false;
  for (size_t i = 0; i < sp; ++i) {
    const char c = line[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '=')) return false;
  }
  for (size_t i = sp + 1; i < line.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(line[i])) && !(line[i] == '\r' && i + 1 == line.size())) return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<TextTokenizer> load_text_tokenizer(const std::filesystem::path& file) {
  check_tokenizer_file_size(file);  // before sniffing: a huge file without newlines would be one huge line
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw ft::ConfigError(file.string() + ": cannot open tokenizer file", "check the path and that it is readable");
  }
  char first = 0;
  while (in.get(first) && std::isspace(static_cast<unsigned char>(first))) {
  }
  if (in && first == '{') {
    in.close();
    const json j = read_json_file(file, "");
    if (j.is_object() && j.contains("model")) return load_tokenizer_json(file);
    if (j.is_object() && j.contains("config") && j.contains("vocab")) return load_tekken(file);
    throw ft::ConfigError(file.string() +
                              ": JSON file is neither a tokenizer.json (no \"model\") nor a tekken.json "
                              "(no \"config\" and \"vocab\")",
                          "point the tokenizer setting at tokenizer.json, tekken.json or a tiktoken tokenizer.model");
  }
  in.clear();
  in.seekg(0);
  std::string line;
  if (std::getline(in, line) && looks_like_tiktoken_line(line)) {
    int32_t count = 0;
    do {
      if (!line.empty() && line != "\r") ++count;
    } while (std::getline(in, line));
    in.close();
    return load_tiktoken(file, llama3_tiktoken_spec(count));
  }
  throw ft::ConfigError(file.string() + ": not a tokenizer.json, tekken.json or tiktoken BPE file",
                        "sentencepiece .model files are loaded separately; otherwise check the file is not "
                        "truncated or an HTML error page");
}

}  // namespace ft::tok
