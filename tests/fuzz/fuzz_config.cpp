// The config loader: YAML, `defaults:` composition, `${...}` interpolation and `key=value` overrides, then binding
// and validation. Payload: config.yaml, optionally followed by "\n%%\n" and overrides (one per line), and by a
// second "\n%%\n" and base.yaml (which config.yaml can name in `defaults:`). A config that loads must print
// (to_yaml) as YAML that loads back to an equal config, as a run directory's config.yaml promises; a damaged
// config.yaml of a checkpoint is compared (yaml_differences) without escaping exceptions.
#include <fstream>

#include "config/loader.h"
#include "fuzz_support.h"

#ifndef FT_FUZZ_SOURCE_DIR
#error "FT_FUZZ_SOURCE_DIR: the source tree, whose configs/ seed this target"
#endif

namespace ft::fuzz {

void target_setup() {
  std::filesystem::create_directories(scratch() / "cfg");
}

std::vector<std::string> seeds() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(FT_FUZZ_SOURCE_DIR) / "configs")) {
    if (e.path().extension() == ".yaml") out.push_back(read_bytes(e.path()));
  }
  out.push_back(
      "defaults: [base.yaml]\nrun: {name: x, output_dir: 'runs/${run.name}'}\ntrain: {max_steps: 10}\n"
      "optimizer: {lr: 1.0e-3}\n%%\ntrain.micro_batch_size=4\noptimizer.betas=[0.9, 0.95]\n"
      "data.train=[{path: a.jsonl, format: chat}]\n%%\nmodel: {hidden_size: 64, num_layers: 2, num_heads: 4}\n"
      "data: {seq_len: 128, packing: true}\n");
  out.push_back(
      "run: {name: '${env:HOME}', seed: 3}\nlora: {enabled: true, r: 8, alpha: 16, targets: [q_proj, v_proj]}\n"
      "scheduler: {type: cosine, warmup_ratio: 0.1}\nbase: &b {lr: 2.0e-4}\noptimizer: *b\n");
  return out;
}

}  // namespace ft::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ft;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const auto [config_text, rest] = fuzz::cut(all, "\n%%\n");
  const auto [override_text, base_text] = fuzz::cut(rest, "\n%%\n");
  const std::string config_copy(config_text);  // (clang 14: no structured bindings inside lambdas)
  const auto dir = fuzz::scratch() / "cfg";
  fuzz::write_bytes(dir / "config.yaml", config_text);
  fuzz::write_bytes(dir / "base.yaml", base_text);
  std::vector<std::string> overrides;
  for (std::string_view lines = override_text; !lines.empty();) {
    const auto [line, tail] = fuzz::cut(lines, "\n");
    if (!line.empty()) overrides.emplace_back(line);
    lines = tail;
  }
  config::LoadedConfig loaded;
  if (!fuzz::accepted([&] { loaded = config::load_config(dir / "config.yaml", overrides); })) return 0;
  const std::string printed = config::to_yaml(loaded.config);
  fuzz::write_bytes(dir / "printed.yaml", printed);
  config::LoadedConfig again;
  // A printed config that does not load back, or loads to another config, is a bug: trap so the fuzzer keeps it.
  if (!fuzz::accepted([&] { again = config::load_config(dir / "printed.yaml", {}); })) __builtin_trap();
  if (!config::equal(loaded.config, again.config)) __builtin_trap();
  fuzz::accepted([&] { config::yaml_differences(config_copy, printed); });
  return 0;
}
