// What metrics.jsonl holds, named once: the training loop writes these records, and `finetune plot`, the sweep's
// summaries, its metric choices and median stopping read them by these names. A line is
// {"event": EVENT, "step": N, "time": unix seconds, FIELD: value, ...}.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ft::metrics {

// Events.
inline constexpr const char* kTrainEvent = "train";  // a log interval of training
inline constexpr const char* kEvalEvent = "eval";    // an evaluation
inline constexpr const char* kStartEvent = "start";  // the time to the first step

// Fields.
inline constexpr const char* kLoss = "loss";
inline constexpr const char* kLr = "lr";
inline constexpr const char* kGradNorm = "grad_norm";
inline constexpr const char* kTokensPerS = "tokens_per_s";
inline constexpr const char* kMfu = "mfu";
inline constexpr const char* kPeakMemoryGib = "peak_memory_gib";
inline constexpr const char* kPerplexity = "perplexity";
inline constexpr const char* kExactMatch = "exact_match";
// The preference objectives' share of pairs whose chosen reward beats the rejected one (TRL's name).
inline constexpr const char* kRewardAccuracies = "rewards/accuracies";
// Their mean margin, chosen reward minus rejected reward (TRL's name).
inline constexpr const char* kRewardMargins = "rewards/margins";

// "eval.loss": how sweeps name a field of an event.
inline std::string metric_name(const char* event, const char* field) {
  return std::string(event) + "." + field;
}

// One log interval of training (event "train").
struct TrainRecord {
  double loss = 0.0;                // the interval's mean loss per objective unit, over all ranks
  double lr = 0.0;                  // learning rate of the interval's last step
  double grad_norm = 0.0;           // global gradient norm before clipping, last step
  double loss_scale = 1.0;          // fp16's dynamic loss scale (1 otherwise)
  double tokens_per_s = 0.0;        // every processed position, all ranks (MFU counts these)
  double target_tokens_per_s = 0.0;  // positions carrying loss
  double step_time_s = 0.0;         // mean optimizer step time of the interval
  double data_wait_s = 0.0;         // mean time a step waited for its batches
  int64_t tokens_seen = 0;          // target tokens since the run started
  int64_t epoch = 0;
  int64_t skipped_steps = 0;        // non-finite steps skipped, and fp16 overflow steps
  double peak_memory_gib = 0.0;     // the caching allocator's peak allocated bytes (0 on the CPU)
  std::optional<double> peak_reserved_gib;  // CUDA: its peak reserved bytes
  std::optional<double> step_peak_memory_gib;  // CUDA: the peak allocated since the first step (the load left out)
  std::optional<double> mfu;                // model FLOPs utilisation, when the device's peak is known
  nlohmann::json objective = nlohmann::json::object();  // the objective's own metrics (the preference ones: TRL's
                                                        // names, e.g. rewards/accuracies), means over its units

  nlohmann::json to_json() const;
};

// One evaluation (event "eval").
struct EvalRecord {
  double loss = 0.0;                  // token-weighted mean cross-entropy over the eval set
  int64_t tokens = 0;                 // the objective's units evaluated (target tokens; pairs for preferences)
  std::optional<double> exact_match;  // fraction of prompt_completion samples generated exactly
  nlohmann::json samples = nlohmann::json::array();  // [{"prompt", "completion"}] of eval.prompts
  double eval_s = 0.0;                // wall time of the whole evaluation
  double generate_s = 0.0;            // of it, generating (exact match and samples; rank 0)
  nlohmann::json objective = nlohmann::json::object();  // the objective's own metrics, means over the eval set

  double perplexity() const;  // exp(loss), capped at exp(50)
  nlohmann::json to_json() const;
};

}  // namespace ft::metrics
