// Evaluation during training: the eval loss and the objective's metrics over the eval set (sharded over ranks),
// exact match on prompt_completion samples and sample generations for eval.prompts (greedy, in batches, on rank 0
// alone), logged as an "eval" event; and the latest evaluation, which ranks checkpoints for checkpoint.keep_best.
// When it runs is the loop's schedule (train/schedule.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "metrics/record.h"
#include "train/build.h"
#include "train/precision.h"
#include "train/train_state.h"

namespace ft::data {
class BatchSource;
}

namespace ft::train {

class Objective;

class Evaluator {
 public:
  // The parts are the Trainer's and outlive the evaluator; `metrics` is null off rank 0, `eval_set` without
  // data.eval.
  Evaluator(const Config& cfg, RunContext ctx, const PrecisionPolicy& precision, model::Transformer& model,
            const tok::Tokenizer& tokenizer, std::shared_ptr<const data::BatchSource> eval_set, Objective& objective,
            metrics::MetricsLogger* metrics);

  // Evaluates the model as it is at progress.step (nothing without data.eval) and lowers progress.best_eval_loss
  // when it beats it. Every rank calls it; they return together.
  metrics::EvalRecord run(TrainState& progress);

  // The eval loss measured at `step`, when the latest evaluation was there: a checkpoint ranks by it for
  // checkpoint.keep_best only when it was measured on that checkpoint's weights.
  std::optional<double> loss_at(int64_t step) const;

 private:
  void measure_loss(metrics::EvalRecord& record);        // loss, tokens and the objective's metrics over all ranks
  void exact_match(metrics::EvalRecord& record);         // eval.exact_match_samples
  void sample_generations(metrics::EvalRecord& record);  // eval.prompts, as {"prompt", "completion"}
  void log(const metrics::EvalRecord& record, int64_t step) const;
  // Greedy completions of `prompts` (eval.max_new_tokens, stopping where `finetune generate` does), as text.
  std::vector<std::string> generate_texts(const std::vector<std::vector<int64_t>>& prompts);
  // Read and encoded once, at construction, so that a bad eval line or prompt stops the run before training, not at
  // the final evaluation with nothing saved.
  void prepare_exact_match();
  void prepare_prompts();
  std::vector<int64_t> prompt_ids(const EvalPrompt& prompt, bool chat) const;

  const Config& cfg_;
  const RunContext ctx_;
  const PrecisionPolicy precision_;
  model::Transformer& model_;
  const tok::Tokenizer& tokenizer_;
  std::shared_ptr<const data::BatchSource> eval_set_;
  Objective& objective_;
  metrics::MetricsLogger* metrics_;
  std::optional<std::pair<int64_t, double>> last_;  // the latest evaluation: (step, loss)
  std::vector<std::vector<int64_t>> exact_match_prompts_;  // eval.exact_match_samples' prompts, encoded
  std::vector<std::string> exact_match_answers_;           // their reference completions
  std::vector<std::vector<int64_t>> prompts_;              // eval.prompts, encoded
};

}  // namespace ft::train
