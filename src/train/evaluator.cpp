#include "train/evaluator.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "data/batch.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/synth.h"
#include "dist/comm.h"
#include "metrics/meters.h"
#include "metrics/metrics.h"
#include "model/generate.h"
#include "model/mode_guards.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"
#include "train/objective.h"
#include "util/error.h"
#include "util/fmt.h"
#include "util/log.h"

namespace ft::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

std::string one_line(std::string text) {
  for (size_t i = text.find('\n'); i != std::string::npos; i = text.find('\n', i + 2)) text.replace(i, 1, "\\n");
  return text;
}

}  // namespace

Evaluator::Evaluator(const Config& cfg, RunContext ctx, const PrecisionPolicy& precision, model::Transformer& model,
                     const tok::Tokenizer& tokenizer, std::shared_ptr<const data::BatchSource> eval_set,
                     Objective& objective, metrics::MetricsLogger* metrics)
    : cfg_(cfg),
      ctx_(std::move(ctx)),
      precision_(precision),
      model_(model),
      tokenizer_(tokenizer),
      eval_set_(std::move(eval_set)),
      objective_(objective),
      metrics_(metrics) {
  prepare_exact_match();
  prepare_prompts();
}

void Evaluator::prepare_exact_match() {
  if (cfg_.eval.exact_match_samples <= 0) return;
  for (auto& sample : data::load_prompt_completions(cfg_.data.eval, cfg_.data.fields, cfg_.eval.exact_match_samples,
                                                    cfg_.data.on_error)) {
    exact_match_prompts_.push_back(data::encode_prompt(tokenizer_, sample.prompt, cfg_.tokenizer.add_bos));
    exact_match_answers_.push_back(std::move(sample.completion));
  }
  if (exact_match_prompts_.empty()) {
    throw ConfigError(
        "eval.exact_match_samples: data.eval holds no prompt_completion or alpaca record to score (exact match "
        "compares a generated completion with the record's; chat and text sources are not scored)",
        "add a prompt_completion or alpaca source to data.eval, or set eval.exact_match_samples: 0");
  }
}

void Evaluator::prepare_prompts() {
  if (cfg_.eval.prompts.empty()) return;
  if (!eval_set_) {
    FT_LOG_WARN(
        "eval.prompts: their generations are logged with each evaluation, which runs on data.eval; without "
        "an eval source none is generated (finetune generate --model <run>/model prompts the trained model)");
    return;
  }
  // eval.prompt_format auto: chat when any training source is chat data, so the prompt reads as training did.
  const bool chat = cfg_.eval.prompt_format == PromptFormat::kChat ||
                    (cfg_.eval.prompt_format == PromptFormat::kAuto &&
                     std::any_of(cfg_.data.train.begin(), cfg_.data.train.end(),
                                 [](const DataSource& src) { return src.format == SourceFormat::kChat; }));
  for (size_t i = 0; i < cfg_.eval.prompts.size(); ++i) {
    prompts_.push_back(prompt_ids(cfg_.eval.prompts[i], chat));
    if (prompts_.back().empty()) {
      throw ConfigError(fmt::format("eval.prompts[{}]: the prompt encodes to no token, and generation needs at least "
                                    "one",
                                    i),
                        "write a non-empty prompt, or set tokenizer.add_bos: true");
    }
  }
}

metrics::EvalRecord Evaluator::run(TrainState& progress) {
  metrics::EvalRecord result;
  if (!eval_set_) return result;
  const auto start = Clock::now();
  model::EvalModeGuard eval_mode(model_);
  at::NoGradGuard no_grad;
  // Evaluation's forward-only shapes are new to cuDNN attention, which plans each (model/mode_guards.h): the first
  // eval of 400 short samples on an H200 spent 2.4 s planning. Flash and memory-efficient attention take them as
  // they come.
  const model::NoCudnnAttentionGuard no_cudnn;
  measure_loss(result);
  // Exact match and samples are generated on rank 0 alone; the others wait at the barrier below.
  const auto generation_start = Clock::now();
  if (ctx_.rank == 0) {
    if (!exact_match_prompts_.empty()) exact_match(result);
    sample_generations(result);
    const auto end = Clock::now();
    result.eval_s = seconds_between(start, end);
    result.generate_s = seconds_between(generation_start, end);
    log(result, progress.step);
  }
  last_ = std::make_pair(progress.step, result.loss);
  if (!progress.best_eval_loss || result.loss < *progress.best_eval_loss) progress.best_eval_loss = result.loss;
  ctx_.comm->barrier();
  return result;
}

std::optional<double> Evaluator::loss_at(int64_t step) const {
  if (last_ && last_->first == step) return last_->second;
  return std::nullopt;
}

void Evaluator::measure_loss(metrics::EvalRecord& result) {
  data::DataLoader loader(eval_set_, loader_options(cfg_, tokenizer_, ctx_, /*shuffle=*/false));
  auto loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(ctx_.device));
  metrics::MetricSums metric_sums;
  int64_t units = 0;
  int64_t batches = 0;
  while (auto batch = loader.next()) {
    if (cfg_.eval.max_batches > 0 && batches >= cfg_.eval.max_batches) break;
    metrics::MetricSums batch_metrics;
    loss_sum += objective_.loss_sum(model_, *batch, &batch_metrics).to(at::kDouble);
    metrics::add_metric_sums(metric_sums, batch_metrics);
    units += objective_.units(*batch);
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
}

void Evaluator::exact_match(metrics::EvalRecord& result) {
  const std::vector<std::string> generated = generate_texts(exact_match_prompts_);
  int64_t correct = 0;
  for (size_t i = 0; i < generated.size(); ++i) {
    if (data::exact_match(generated[i], exact_match_answers_[i])) ++correct;
  }
  result.exact_match = static_cast<double>(correct) / static_cast<double>(generated.size());
}

void Evaluator::sample_generations(metrics::EvalRecord& result) {
  const std::vector<std::string> completions = generate_texts(prompts_);
  for (size_t i = 0; i < completions.size(); ++i) {
    const EvalPrompt& prompt = cfg_.eval.prompts[i];
    // A prompt given as turns is shown by its last (user) turn.
    const std::string shown = prompt.messages.empty() ? prompt.text : prompt.messages.back().content;
    result.samples.push_back({{"prompt", shown}, {"completion", completions[i]}});
  }
}

std::vector<int64_t> Evaluator::prompt_ids(const EvalPrompt& prompt, bool chat) const {
  if (prompt.messages.empty() && !chat) return data::encode_prompt(tokenizer_, prompt.text, cfg_.tokenizer.add_bos);
  // Turns are always prompted in the chat template.
  std::vector<chat::ChatMessage> turns;
  for (const auto& t : prompt.messages) turns.push_back({t.role, t.content});
  if (turns.empty()) turns.push_back({"user", prompt.text});
  return chat::chat_prompt_ids(name_of(cfg_.data.template_name), cfg_.model.path, tokenizer_, cfg_.data.system_prompt,
                               turns);
}

std::vector<std::string> Evaluator::generate_texts(const std::vector<std::vector<int64_t>>& prompts) {
  if (prompts.empty()) return {};
  model::GenerateOptions gen;  // greedy
  gen.max_new_tokens = cfg_.eval.max_new_tokens;
  gen.stop_ids = model::stop_ids_for(model_, tokenizer_.eos_id());
  std::vector<std::vector<int64_t>> generated;
  {
    const auto autocast = precision_.autocast_on(ctx_.device.type());
    generated = model::generate_batch(model_, prompts, gen);
  }
  std::vector<std::string> texts;
  texts.reserve(generated.size());
  for (auto& ids : generated) texts.push_back(tokenizer_.decode(model::without_stop(std::move(ids), gen)));
  return texts;
}

void Evaluator::log(const metrics::EvalRecord& result, int64_t step) const {
  metrics_->log(metrics::kEvalEvent, step, result.to_json());
  // Perplexity is a token cross-entropy's; a preference loss reports how often the chosen reward wins instead.
  const bool pairs = result.objective.contains(metrics::kRewardAccuracies);
  FT_LOG_INFO("eval at step {}: loss {:.4f}, {}{} ({:.1f} s, {:.1f} s of it generating)", step, result.loss,
              pairs ? fmt::format("reward accuracy {:.1f}%",
                                  100.0 * result.objective.at(metrics::kRewardAccuracies).get<double>())
                    : fmt::format("perplexity {:.2f}", result.perplexity()),
              result.exact_match ? fmt::format(", exact match {:.1f}%", 100.0 * *result.exact_match) : "",
              result.eval_s, result.generate_s);
  for (const auto& sample : result.samples) {  // one line each: newlines shown as \n
    FT_LOG_INFO("  {} -> {}", one_line(sample.at("prompt").get<std::string>()),
                one_line(sample.at("completion").get<std::string>()));
  }
}

}  // namespace ft::train
