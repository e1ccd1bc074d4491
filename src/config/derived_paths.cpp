#include "config/derived_paths.h"

#include <filesystem>

namespace ft::config {

void fill_derived_paths(Config& cfg) {
  const std::filesystem::path run_dir = std::filesystem::absolute(cfg.run.output_dir);
  const auto& synth = cfg.data.synth;
  auto fill = [&](std::vector<DataSource>& sources, const char* split, int64_t count) {
    if (synth.task.empty() || sources.empty() || count <= 0 || !sources.front().path.empty()) return;
    sources.front().path = (run_dir / "data" / (synth.task + "-" + split + ".jsonl")).string();
  };
  fill(cfg.data.train, "train", synth.train_samples);
  fill(cfg.data.eval, "eval", synth.eval_samples);
  auto& tokenizer = cfg.tokenizer;
  if (tokenizer.train_vocab_size > 0 && tokenizer.path.empty() && cfg.model.path.empty()) {
    tokenizer.path = (run_dir / "tokenizer" / "tokenizer.model").string();
  }
}

}  // namespace ft::config
