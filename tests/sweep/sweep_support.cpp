#include "sweep/sweep_support.h"

#include <cmath>
#include <fstream>
#include <sstream>

namespace ft::test {

std::string tiny_sweep_base(const std::filesystem::path& dir) {
  return "run: {seed: 5, device: cpu, deterministic: true}\n"
         "data:\n"
         "  synth: {task: reverse, train_samples: 2000, eval_samples: 32, seed: 2}\n"
         "  train: [{format: prompt_completion}]\n"
         "  eval: [{format: prompt_completion}]\n"
         "  seq_len: 32\n"
         "  cache_dir: " +
         (dir / "cache").string() +
         "\n"
         "tokenizer: {train_vocab_size: 300}\n"
         "model: {hidden_size: 32, intermediate_size: 64, num_layers: 1, num_heads: 2, num_kv_heads: 1,\n"
         "        max_position_embeddings: 64}\n"
         "train: {max_steps: 16, micro_batch_size: 8}\n"
         "optimizer: {lr: 2.0e-3}\n"
         "scheduler: {type: cosine, warmup_steps: 2}\n"
         "eval: {every_steps: 8, max_batches: 2}\n"
         "checkpoint: {every_steps: 4, keep_last: 2}\n"
         "logging: {every_steps: 1, progress: off}\n";
}

std::string sweep_cmd(const std::filesystem::path& base, const std::filesystem::path& sweep, const std::string& args) {
  return shell_quote(binary()) + " sweep --config " + shell_quote(base.string()) + " --sweep " +
         shell_quote(sweep.string()) + " " + args;
}

std::vector<std::map<std::string, std::string>> read_csv(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> lines;
  std::vector<std::string> cells;
  std::string cell;
  bool quoted = false;
  char c = 0;
  while (in.get(c)) {
    if (quoted) {
      if (c == '"') {
        if (in.peek() == '"') {
          cell += '"';
          in.get(c);
        } else {
          quoted = false;
        }
      } else {
        cell += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.push_back(cell);
      cell.clear();
    } else if (c == '\n') {
      cells.push_back(cell);
      cell.clear();
      lines.push_back(cells);
      cells.clear();
    } else {
      cell += c;
    }
  }
  std::vector<std::map<std::string, std::string>> rows;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::map<std::string, std::string> row;
    for (size_t j = 0; j < lines[0].size() && j < lines[i].size(); ++j) row[lines[0][j]] = lines[i][j];
    rows.push_back(row);
  }
  return rows;
}

std::map<std::string, std::map<int64_t, nlohmann::json>> read_metrics(const std::filesystem::path& run_dir) {
  std::map<std::string, std::map<int64_t, nlohmann::json>> out;
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;
    out[j.at("event").get<std::string>()][j.at("step").get<int64_t>()] = j;
  }
  return out;
}

nlohmann::json trial_state(const std::filesystem::path& trial_dir) {
  const auto j = nlohmann::json::parse(read_file(trial_dir / "trial.json"), nullptr, false);
  return j.is_discarded() ? nlohmann::json::object() : j;
}

std::string text_at(const nlohmann::json& j, const std::string& key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get_ref<const std::string&>() : std::string();
}

double number_at(const nlohmann::json& j, const std::string& key) {
  const auto it = j.find(key);
  if (it == j.end()) return std::nan("");
  if (const auto* d = it->get_ptr<const double*>()) return *d;
  if (const auto* i = it->get_ptr<const int64_t*>()) return static_cast<double>(*i);
  if (const auto* u = it->get_ptr<const uint64_t*>()) return static_cast<double>(*u);
  return std::nan("");
}

std::optional<std::pair<uint32_t, uint32_t>> png_size(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(24, '\0');
  if (!in.read(head.data(), 24) || head.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0 || head.compare(12, 4, "IHDR") != 0) {
    return std::nullopt;
  }
  auto be32 = [&](size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(head[at + i]);
    return v;
  };
  return std::make_pair(be32(16), be32(20));
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

}  // namespace ft::test
