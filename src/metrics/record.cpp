#include "metrics/record.h"

#include <algorithm>
#include <cmath>

namespace ft::metrics {

nlohmann::json TrainRecord::to_json() const {
  nlohmann::json j;
  j[kLoss] = loss;
  j[kLr] = lr;
  j[kGradNorm] = grad_norm;
  j["loss_scale"] = loss_scale;
  j[kTokensPerS] = tokens_per_s;
  j["target_tokens_per_s"] = target_tokens_per_s;
  j["step_time_s"] = step_time_s;
  j["data_wait_s"] = data_wait_s;
  j["tokens_seen"] = tokens_seen;
  j["epoch"] = epoch;
  j["skipped_steps"] = skipped_steps;
  j[kPeakMemoryGib] = peak_memory_gib;
  if (peak_reserved_gib) j["peak_reserved_gib"] = *peak_reserved_gib;
  if (step_peak_memory_gib) j["step_peak_memory_gib"] = *step_peak_memory_gib;
  if (mfu) j[kMfu] = *mfu;
  j.update(objective);
  return j;
}

double EvalRecord::perplexity() const {
  return std::exp(std::min(loss, 50.0));
}

nlohmann::json EvalRecord::to_json() const {
  nlohmann::json j;
  j[kLoss] = loss;
  j[kPerplexity] = perplexity();
  j["tokens"] = tokens;
  if (exact_match) j[kExactMatch] = *exact_match;
  if (!samples.empty()) j["samples"] = samples;
  j["eval_s"] = eval_s;
  j["generate_s"] = generate_s;
  j.update(objective);
  return j;
}

}  // namespace ft::metrics
