// `finetune export`: merge a LoRA adapter into its base model and write a Hugging Face model directory. An adapter
// trained with tokenizer.add_tokens brings its rows (PEFT trainable_token_indices): the merged model has the grown
// vocabulary, and the adapter's tokenizer files (which hold the added tokens) replace the base model's.
#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "cli/commands.h"
#include "model/adapter_check.h"
#include "model/lora.h"
#include "model/pretrained.h"
#include "model/tokenizer_files.h"
#include "util/error.h"
#include "util/fmt.h"
#include "util/fs.h"

namespace ft::cli {
namespace {

struct ExportArgs {
  std::string model, adapter, out, dtype;
  int64_t shard_size_mb = 5000;
  bool force = false;  // apply an adapter whose recorded base model differs from --model
};

// The adapted modules for the log line: as the adapter lists them, or their count where they are many (a regex
// target_modules, as multimodal adapters have, names every path: 238 on a 34-layer model).
std::string targets_text(const std::vector<std::string>& targets) {
  if (targets.size() <= 8) return fmt::format("{}", fmt::join(targets, ","));
  return fmt::format("{} modules", targets.size());
}

void run_export(const ExportArgs& a) {
  const std::filesystem::path model_dir(a.model), out = std::filesystem::path(a.out).lexically_normal();
  // "exp/m2/" names the directory exp/m2 (the staging directory's name is built from the last component).
  const std::filesystem::path out_dir = out.has_filename() ? out : out.parent_path();
  std::error_code ec;
  if (std::filesystem::exists(out_dir, ec) && !std::filesystem::is_directory(out_dir, ec)) {
    throw ConfigError("--out " + out_dir.string() + " exists and is not a directory",
                      "name a new directory (or an empty one) for the merged model");
  }
  if (std::filesystem::exists(out_dir, ec) && !std::filesystem::is_empty(out_dir, ec)) {
    throw ConfigError("--out " + out_dir.string() + " exists and is not empty", "choose a new directory or remove it");
  }
  if (!std::filesystem::is_directory(model_dir, ec)) {
    throw ConfigError("--model " + model_dir.string() + " is not a directory",
                      "give the Hugging Face model directory the adapter was trained on");
  }
  model::check_adapter_base(a.adapter, model_dir, a.force);
  const model::ModelArgs base_args = model::load_hf_config(model_dir);
  const at::ScalarType save_dtype = model::dtype_from_name(a.dtype.empty() ? base_args.torch_dtype : a.dtype);
  // Merge in F32 on the CPU so W + (alpha/r) B A is rounded once, into the saved dtype.
  auto model = model::load_pretrained(model_dir, at::kCPU, at::kFloat);
  const auto lora = model::load_adapter(*model, a.adapter);
  // Rows of tokens added in training (trainable_token_indices) grew the vocabulary; they are merged like the rest.
  const int64_t vocab = model->args().vocab_size;
  model::merge_lora(*model);
  model->to(save_dtype);
  // A multimodal checkpoint's vision tower and projector (read as stored) take the saved dtype too, as in
  // transformers' save after .to(dtype): config.json's torch_dtype names one dtype for all of them.
  for (auto& [name, value] : model->passthrough) {
    if (value.is_floating_point()) value = value.to(save_dtype);
  }
  const auto parent = out_dir.has_parent_path() ? out_dir.parent_path() : std::filesystem::path(".");
  std::filesystem::create_directories(parent);
  StagedDir staged(out_dir, parent / (out_dir.filename().string() + ".tmp-" + std::to_string(::getpid())));
  model::save_pretrained(*model, staged.path(), a.shard_size_mb * 1000 * 1000);
  // The adapter's files replace the base model's of the same name: each is listed once, by where it came from.
  const auto from_base = model::copy_tokenizer_files(model_dir, staged.path());
  const auto from_adapter = model::copy_tokenizer_files(a.adapter, staged.path());
  std::vector<std::string> copied;
  for (const auto& name : from_base) {
    if (std::find(from_adapter.begin(), from_adapter.end(), name) == from_adapter.end()) copied.push_back(name);
  }
  for (const auto& name : from_adapter) copied.push_back(name + " (from adapter)");
  staged.commit();  // replaces an empty --out directory, if any
  FT_LOG_INFO("merged LoRA r={} alpha={} ({}) into {} ({}{}); copied {}", lora.rank, lora.alpha,
              targets_text(lora.targets), out_dir.string(), model::dtype_name(save_dtype),
              vocab != base_args.vocab_size ? fmt::format(", vocabulary {} -> {}", base_args.vocab_size, vocab) : "",
              copied.empty() ? std::string("no tokenizer files") : fmt::format("{}", fmt::join(copied, ", ")));
}

}  // namespace

void add_export(CLI::App& app, const Globals& /*globals*/, int& exit_code) {
  auto* sub = app.add_subcommand("export", "Merge a LoRA adapter into its base model and save a Hugging Face model");
  sub->footer(
      "Example (a LoRA run of configs/llama3-8b-lora.yaml):\n"
      "  finetune export --model /models/Llama-3.1-8B --adapter runs/llama3-8b-lora/adapter "
      "--out runs/llama3-8b-lora/merged");
  auto a = std::make_shared<ExportArgs>();
  sub->add_option("--model", a->model, "Base Hugging Face model directory")->required();
  sub->add_option("--adapter", a->adapter, "PEFT LoRA adapter directory")->required();
  sub->add_option("--out", a->out, "Output directory (must not exist or be empty)")->required();
  sub->add_flag("--force", a->force,
                "Merge even if adapter_config.json names a base model whose config.json differs from --model's");
  sub->add_option("--dtype", a->dtype, "Saved dtype: fp32 | bf16 | fp16 (default: the base model's)");
  sub->add_option("--shard-size-mb", a->shard_size_mb,
                  "Shard the weights above this size, in MB (10^6 bytes, as checkpoint.shard_size_mb)")
      ->default_val(5000);
  sub->callback([a, &exit_code] {
    run_export(*a);
    exit_code = 0;
  });
}

}  // namespace ft::cli
