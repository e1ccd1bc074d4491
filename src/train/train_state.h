// The training loop's progress, saved in checkpoints as the "progress" part of trainer_state.json.
#pragma once

#include <cstdint>
#include <optional>

#include "ckpt/stateful.h"
#include "util/json_int.h"

namespace ft::train {

struct TrainState : ckpt::Stateful {
  int64_t step = 0;                      // optimizer steps done
  int64_t epoch = 0;                     // epochs started
  int64_t tokens_seen = 0;               // global target tokens trained on
  int64_t nan_skips = 0;                 // steps skipped for a non-finite loss or gradient norm
  std::optional<double> best_eval_loss;  // lowest eval loss so far

  nlohmann::json state_dict() const override {
    nlohmann::json s = {{"step", step}, {"epoch", epoch}, {"tokens_seen", tokens_seen}, {"nan_skips", nan_skips}};
    if (best_eval_loss) s["best_eval_loss"] = *best_eval_loss;
    return s;
  }
  void load_state_dict(const nlohmann::json& s) override {
    step = json_integer_at<int64_t>(s, "step");
    epoch = json_integer_at<int64_t>(s, "epoch");
    tokens_seen = json_integer_at<int64_t>(s, "tokens_seen");
    nan_skips = json_integer_at<int64_t>(s, "nan_skips");
    best_eval_loss =
        s.contains("best_eval_loss") ? std::optional<double>(s.at("best_eval_loss").get<double>()) : std::nullopt;
  }
};

}  // namespace ft::train
