// `finetune generate`: sample from a Hugging Face model directory (optionally with a LoRA adapter), KV-cached.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "config/settings.h"
#include "model/adapter_check.h"
#include "model/generate.h"
#include "model/kernel_policy.h"
#include "model/lora.h"
#include "model/nf4_linear.h"
#include "model/pretrained.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::cli {
namespace {

struct GenerateArgs {
  std::string model, adapter, prompt, prompt_ids, system, device = "auto", dtype = "fp32", quantize = "none",
                                                          nf4_compute = "dtype";
  int64_t max_new_tokens = 64, top_k = 0;
  double temperature = 0.0, top_p = 1.0;
  uint64_t seed = 0;
  bool json = false, no_bos = false, chat = false;
  bool no_fused_kernels = false;  // ATen's ops only, as train.fused_kernels: false
  bool force = false;        // apply an adapter whose recorded base model differs from --model
  std::vector<int64_t> ids;  // --prompt-ids, parsed (empty: --prompt gives the prompt)
};

// Ids from the command line are checked against the model's vocabulary (with an adapter's added tokens): an id
// outside it is bad input, exit code 2, rather than a failure inside the model.
void check_prompt_ids(const std::vector<int64_t>& ids, int64_t vocab_size, const std::filesystem::path& model_dir) {
  for (const int64_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      throw ConfigError(fmt::format("--prompt-ids: token id {} is outside the vocabulary of {} (ids 0 to {})", id,
                                    model_dir.string(), vocab_size - 1),
                        "give ids of the model's tokenizer, or --prompt TEXT to have them tokenized");
    }
  }
}

// --chat: the prompt as one user turn (after an optional system turn) in the model's own chat template, with the
// generation prompt, tokenized as apply_chat_template(..., add_generation_prompt=True) does.
std::vector<int64_t> chat_prompt(const std::filesystem::path& model_dir, const tok::Tokenizer& tokenizer,
                                 const std::string& system, const std::string& user) {
  const auto source = chat::find_chat_template(model_dir);
  if (!source) {
    throw ConfigError("--chat: " + model_dir.string() +
                          " has no chat template (chat_template.jinja or "
                          "tokenizer_config.json's chat_template)",
                      "drop --chat and write the prompt in the model's format, or add the template to the directory");
  }
  return chat::chat_prompt_ids("auto", model_dir, tokenizer, system, {{"user", user}});
}

constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tokenizer.model", "tekken.json"};

// The model of --model on --device, quantized as --quantize and --nf4-compute say, with --adapter's weights.
std::shared_ptr<model::Transformer> load_model(const GenerateArgs& a, at::Device device) {
  const std::filesystem::path model_dir(a.model);
  if (!a.adapter.empty()) model::check_adapter_base(a.adapter, model_dir, a.force);
  // --quantize: the projections as a quantized base run them in training (model.quantize), e.g. to try an adapter
  // trained on that base; quantized while read, as in training.
  const auto quantize = parse_setting<BaseQuantization>(a.quantize);
  if (!quantize) {
    throw ConfigError("--quantize: invalid value '" + a.quantize + "'",
                      "expected " + setting_names<BaseQuantization>());
  }
  // --nf4-compute: the NF4 projections' GEMMs as model.nf4_compute runs them in training (fp8: e4m3 weights with row
  // scales, each token's input scaled; on the CPU and where FP8 GEMMs cannot run, emulated in F32).
  const auto nf4_compute = parse_setting<Nf4Compute>(a.nf4_compute);
  if (!nf4_compute) {
    throw ConfigError("--nf4-compute: invalid value '" + a.nf4_compute + "'",
                      "expected " + setting_names<Nf4Compute>());
  }
  if (*nf4_compute != Nf4Compute::kDtype && *quantize != BaseQuantization::kNf4) {
    throw ConfigError("--nf4-compute " + a.nf4_compute + " needs --quantize nf4 (it sets the GEMMs of NF4 weights)",
                      "add --quantize nf4, or drop --nf4-compute");
  }
  auto model = model::load_pretrained(model_dir, device, model::dtype_from_name(a.dtype), *quantize);
  if (*nf4_compute != Nf4Compute::kDtype) {
    const auto left = model::set_nf4_compute(*model, *nf4_compute);
    if (!left.empty()) {
      FT_LOG_WARN("--nf4-compute {}: sizes that are no multiples of 16 keep their GEMMs in {}: {}", a.nf4_compute,
                  a.dtype, fmt::join(left, ", "));
    }
  }
  if (!a.adapter.empty()) {
    model::load_adapter(*model, a.adapter);
    model->to(device);
  }
  return model;
}

// The prompt's ids: --prompt-ids as given (checked against the vocabulary), else --prompt through the tokenizer of
// `tokenizer_dir` (with BOS, or as a user turn of its chat template with --chat).
std::vector<int64_t> prompt_ids(const GenerateArgs& a, const tok::Tokenizer* tokenizer,
                                const std::filesystem::path& tokenizer_dir, int64_t vocab_size) {
  if (!a.ids.empty()) {
    check_prompt_ids(a.ids, vocab_size, a.model);
    return a.ids;
  }
  if (!tokenizer) {
    throw ConfigError("--prompt needs a tokenizer in " + a.model + ", which has none",
                      "use --prompt-ids, or put the model's tokenizer files (tokenizer.json, tokenizer.model or "
                      "tekken.json) in the model directory");
  }
  if (a.chat) return chat_prompt(tokenizer_dir, *tokenizer, a.system, a.prompt);
  std::vector<int64_t> prompt;
  if (!a.no_bos && tokenizer->bos_id() >= 0) prompt.push_back(tokenizer->bos_id());
  const auto body = tokenizer->encode(a.prompt);
  prompt.insert(prompt.end(), body.begin(), body.end());
  return prompt;
}

void run_generate(const GenerateArgs& a) {
  const std::optional<DeviceSetting> setting = DeviceSetting::parse(a.device);
  if (!setting) {
    throw ConfigError("--device: invalid value '" + a.device + "'",
                      std::string("expected ") + DeviceSetting::kExpected);
  }
  const at::Device device = resolve_device(*setting, 0, "--device");
  const auto model = load_model(a, device);
  // The kernels training runs with (train.fused_kernels, on by default): on a GPU the fused norms, grouped GEMMs,
  // RoPE, SwiGLU and FP8 GEMMs, each where it takes the dtype (most need --dtype bf16); on the CPU, ATen's ops.
  model->set_kernel_policy(model::KernelPolicy::resolve(!a.no_fused_kernels, device, model::dtype_from_name(a.dtype)));
  const auto has_tokenizer = [](const std::filesystem::path& dir) {
    return std::any_of(std::begin(kTokenizerFiles), std::end(kTokenizerFiles),
                       [&](const char* name) { return std::filesystem::exists(dir / name); });
  };
  // An adapter written by training holds the tokenizer and chat template it trained with (with tokenizer.add_tokens,
  // tokens the base model's tokenizer lacks): they win over the base model's.
  const std::filesystem::path tokenizer_dir = !a.adapter.empty() && has_tokenizer(a.adapter)
                                                  ? std::filesystem::path(a.adapter)
                                                  : std::filesystem::path(a.model);
  std::unique_ptr<tok::Tokenizer> tokenizer;
  if (has_tokenizer(tokenizer_dir)) tokenizer = tok::Tokenizer::load(tokenizer_dir, tokenizer_dir);
  const std::vector<int64_t> prompt = prompt_ids(a, tokenizer.get(), tokenizer_dir, model->args().vocab_size);
  model::GenerateOptions opts;
  opts.max_new_tokens = a.max_new_tokens;
  opts.temperature = a.temperature;
  opts.top_p = a.top_p;
  opts.top_k = a.top_k;
  opts.seed = a.seed;
  opts.stop_ids = model::stop_ids_for(*model, tokenizer ? tokenizer->eos_id() : -1);
  const int64_t context = model->args().max_position_embeddings;
  if (static_cast<int64_t>(prompt.size()) + opts.max_new_tokens > context) {
    FT_LOG_WARN(
        "the prompt's {} tokens and up to {} new ones exceed the model's context of {} positions "
        "(max_position_embeddings): what goes past it was never trained and is likely garbage",
        prompt.size(), opts.max_new_tokens, context);
  }
  const auto generated = model::generate(*model, prompt, opts);
  const std::string text = tokenizer ? tokenizer->decode(model::without_stop(generated, opts)) : std::string();
  if (a.json) {
    std::cout << nlohmann::json{{"prompt_ids", prompt}, {"generated_ids", generated}, {"text", text}}.dump() << "\n";
  } else if (tokenizer) {
    std::cout << text << "\n";
  } else {
    std::cout << fmt::format("{}", fmt::join(generated, " ")) << "\n";
  }
}

}  // namespace

void add_generate(CLI::App& app, const Globals& /*globals*/, int& exit_code) {
  auto* sub = app.add_subcommand("generate", "Generate text from a Hugging Face model directory (KV cache)");
  sub->footer(
      "Greedy when --temperature is 0. Stops at an EOS id of config.json/the tokenizer; the EOS id is part of\n"
      "generated_ids but not of the text. Without a tokenizer in --model, use --prompt-ids (text is empty).\n"
      "Example (the demo's model):\n"
      "  finetune generate --model runs/demo/model --prompt $'Reverse: 1 2 3 4 5\\nAnswer:' --max-new-tokens 24\n"
      "  finetune generate --model /models/Meta-Llama-3-8B-Instruct --chat --prompt \"Hi!\" --max-new-tokens 32");
  auto a = std::make_shared<GenerateArgs>();
  sub->add_option("--model", a->model, "Hugging Face model directory (config.json + safetensors)")->required();
  sub->add_option("--adapter", a->adapter,
                  "PEFT LoRA adapter directory to apply (its tokenizer and chat template, if any, are used)");
  sub->add_flag("--force", a->force,
                "Apply --adapter even if adapter_config.json names a base model whose config.json differs");
  auto* text = sub->add_option("--prompt", a->prompt, "Prompt text (needs the model's tokenizer; BOS is prepended)");
  auto* ids = sub->add_option("--prompt-ids", a->prompt_ids, "Prompt token ids, e.g. \"1 2 3\"");
  text->excludes(ids);
  sub->add_option("--max-new-tokens", a->max_new_tokens, "Tokens to generate at most")->default_val(64);
  sub->add_option("--temperature", a->temperature, "Sampling temperature; 0 = greedy")->default_val(0.0);
  sub->add_option("--top-p", a->top_p, "Nucleus sampling probability mass")->default_val(1.0);
  sub->add_option("--top-k", a->top_k, "Keep only the k most likely tokens; 0 = all")->default_val(0);
  sub->add_option("--seed", a->seed, "Sampling seed")->default_val(0);
  sub->add_option("--device", a->device, "auto | cpu | cuda | cuda:N")->default_val("auto");
  sub->add_option("--dtype", a->dtype, "Parameter dtype: fp32 | bf16 | fp16")->default_val("fp32");
  sub->add_option(
         "--quantize", a->quantize,
         "The decoder layers' projections and MoE experts as a quantized base (model.quantize): none | nf4 | fp8")
      ->default_val("none");
  sub->add_option("--nf4-compute", a->nf4_compute,
                  "With --quantize nf4: the GEMMs as model.nf4_compute runs them: dtype | fp8")
      ->default_val("dtype");
  sub->add_flag("--no-bos", a->no_bos, "Do not prepend BOS to --prompt");
  sub->add_flag("--no-fused-kernels", a->no_fused_kernels,
                "On a GPU, run ATen's ops, not the fused kernels (train.fused_kernels)");
  sub->add_flag("--chat", a->chat, "Send --prompt as a user turn in the model's own chat template");
  sub->add_option("--system", a->system, "With --chat: a system turn before the prompt");
  sub->add_flag("--json", a->json, "Print {\"prompt_ids\", \"generated_ids\", \"text\"} as one JSON object");
  sub->callback([a, text, ids, &exit_code] {
    if (text->count() == 0 && ids->count() == 0) {
      throw ConfigError("generate needs --prompt TEXT or --prompt-ids \"1 2 3\"");
    }
    if (text->count() > 0 && a->prompt.empty()) {
      throw ConfigError("--prompt is empty",
                        "give the text to continue, e.g. --prompt \"Hello\", or token ids with "
                        "--prompt-ids (the BOS id alone starts from nothing)");
    }
    if (ids->count() > 0) a->ids = parse_ids(a->prompt_ids, "--prompt-ids");  // before the model loads
    // Negated comparisons, so that NaN is refused too.
    if (!(a->temperature >= 0 && std::isfinite(a->temperature)) || !(a->top_p > 0 && a->top_p <= 1) || a->top_k < 0 ||
        a->max_new_tokens < 0) {
      throw ConfigError(
          "generate: need a finite --temperature >= 0, 0 < --top-p <= 1, --top-k >= 0 and "
          "--max-new-tokens >= 0");
    }
    run_generate(*a);
    exit_code = 0;
  });
}

}  // namespace ft::cli
