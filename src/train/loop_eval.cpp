// Evaluation: eval loss and perplexity over the eval set (sharded over ranks), exact match on prompt_completion
// samples by greedy generation, and sample generations for eval.prompts.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "data/batch.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/synth.h"
#include "dist/comm.h"
#include "metrics/meters.h"
#include "metrics/metrics.h"
#include "metrics/record.h"
#include "model/generate.h"
#include "model/mode_guards.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"
#include "train/objective.h"
#include "train/trainer.h"
#include "util/fmt.h"

namespace ft::train {
namespace {

std::string one_line(std::string text) {
  for (size_t i = text.find('\n'); i != std::string::npos; i = text.find('\n', i + 2)) text.replace(i, 1, "\\n");
  return text;
}

}  // namespace

metrics::EvalRecord Trainer::evaluate() {
  metrics::EvalRecord result;
  if (!data_.eval_set) return result;
  const auto start = std::chrono::steady_clock::now();
  model::EvalModeGuard eval_mode(*model_.model);
  at::NoGradGuard no_grad;

  data::DataLoader loader(data_.eval_set, loader_options(cfg_, *tokenizer_, ctx_, /*shuffle=*/false));

  auto loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(ctx_.device));
  metrics::MetricSums metric_sums;
  int64_t units = 0;
  int64_t batches = 0;
  while (auto batch = loader.next()) {
    if (cfg_.eval.max_batches > 0 && batches >= cfg_.eval.max_batches) break;
    metrics::MetricSums batch_metrics;
    loss_sum += step_->objective().loss_sum(*model_.model, *batch, &batch_metrics).to(at::kDouble);
    metrics::add_metric_sums(metric_sums, batch_metrics);
    units += step_->objective().units(*batch);
    ++batches;
  }
  // Units, loss and the objective's metrics summed over ranks in one collective.
  std::vector<double> sums{static_cast<double>(units), loss_sum.item<double>()};
  for (const auto& [name, sum] : metric_sums) sums.push_back(sum.item<double>());
  sums = dist::all_reduce_sum(*ctx_.comm, std::move(sums));
  result.tokens = static_cast<int64_t>(sums[0]);
  const double denominator = std::max<double>(1.0, sums[0]);
  result.loss = sums[1] / denominator;
  for (size_t i = 0; i < metric_sums.size(); ++i) result.objective[metric_sums[i].first] = sums[i + 2] / denominator;

  // Exact match and samples are generated on rank 0 alone; the others wait at the barrier below.
  const auto generation_start = std::chrono::steady_clock::now();
  if (ctx_.rank == 0 && cfg_.eval.exact_match_samples > 0) {
    const auto samples = data::load_prompt_completions(cfg_.data.eval, cfg_.data.fields, cfg_.eval.exact_match_samples);
    int64_t correct = 0;
    for (const auto& sample : samples) {
      const auto prompt_ids = data::encode_prompt(*tokenizer_, sample.prompt, cfg_.tokenizer.add_bos);
      if (data::exact_match(generate_text(prompt_ids), sample.completion)) ++correct;
    }
    if (!samples.empty()) result.exact_match = static_cast<double>(correct) / static_cast<double>(samples.size());
  }
  if (ctx_.rank == 0) {
    for (const auto& [prompt, completion] : sample_generations()) {
      result.samples.push_back({{"prompt", prompt}, {"completion", completion}});
    }
    const auto end = std::chrono::steady_clock::now();
    result.eval_s = std::chrono::duration<double>(end - start).count();
    result.generate_s = std::chrono::duration<double>(end - generation_start).count();
    metrics_->log(metrics::kEvalEvent, progress_.step, result.to_json());
    // Perplexity is a token cross-entropy's; a preference loss reports how often the chosen reward wins instead.
    const bool pairs = result.objective.contains(metrics::kRewardAccuracies);
    FT_LOG_INFO("eval at step {}: loss {:.4f}, {}{} ({:.1f} s, {:.1f} s of it generating)", progress_.step, result.loss,
                pairs ? fmt::format("reward accuracy {:.1f}%",
                                    100.0 * result.objective[metrics::kRewardAccuracies].get<double>())
                      : fmt::format("perplexity {:.2f}", result.perplexity()),
                result.exact_match ? fmt::format(", exact match {:.1f}%", 100.0 * *result.exact_match) : "",
                result.eval_s, result.generate_s);
    for (const auto& sample : result.samples) {  // one line each: newlines shown as \n
      FT_LOG_INFO("  {} -> {}", one_line(sample["prompt"].get<std::string>()),
                  one_line(sample["completion"].get<std::string>()));
    }
  }
  last_eval_ = std::make_pair(progress_.step, result.loss);
  if (!progress_.best_eval_loss || result.loss < *progress_.best_eval_loss) progress_.best_eval_loss = result.loss;
  ctx_.comm->barrier();
  return result;
}

std::string Trainer::generate_text(const std::vector<int64_t>& prompt_ids) {
  // Greedy, stopping where `finetune generate` does.
  model::GenerateOptions gen;
  gen.max_new_tokens = cfg_.eval.max_new_tokens;
  gen.stop_ids = model::stop_ids_for(*model_.model, tokenizer_->eos_id());
  std::vector<int64_t> generated;
  {
    const auto autocast = precision_.autocast_on(ctx_.device.type());
    generated = model::generate(*model_.model, prompt_ids, gen);
  }
  return tokenizer_->decode(model::without_stop(generated, gen));
}

std::vector<std::pair<std::string, std::string>> Trainer::sample_generations() {
  std::vector<std::pair<std::string, std::string>> out;
  // eval.prompt_format auto: chat when any training source is chat data, so the prompt reads as training did.
  const bool chat =
      cfg_.eval.prompt_format == PromptFormat::kChat ||
      (cfg_.eval.prompt_format == PromptFormat::kAuto &&
       std::any_of(cfg_.data.train.begin(), cfg_.data.train.end(),
                   [](const DataSource& src) { return src.format == SourceFormat::kChat; }));
  for (const auto& prompt : cfg_.eval.prompts) {
    std::vector<int64_t> prompt_ids;
    if (!prompt.messages.empty() || chat) {  // turns are always prompted in the chat template
      std::vector<chat::ChatMessage> turns;
      for (const auto& t : prompt.messages) turns.push_back({t.role, t.content});
      if (turns.empty()) turns.push_back({"user", prompt.text});
      prompt_ids = chat::chat_prompt_ids(name_of(cfg_.data.template_name), cfg_.model.path, *tokenizer_,
                                         cfg_.data.system_prompt, turns);
    } else {
      prompt_ids = data::encode_prompt(*tokenizer_, prompt.text, cfg_.tokenizer.add_bos);
    }
    // A prompt given as turns is shown by its last (user) turn.
    const std::string shown = prompt.messages.empty() ? prompt.text : prompt.messages.back().content;
    out.emplace_back(shown, generate_text(prompt_ids));
  }
  return out;
}

}  // namespace ft::train
