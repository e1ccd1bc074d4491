// The training loop's progress, saved in checkpoints as the "progress" part of trainer_state.json.
#pragma once

#include <cstdint>
#include <optional>

#include "ckpt/stateful.h"

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
    step = s.at("step").get<int64_t>();
    epoch = s.at("epoch").get<int64_t>();
    tokens_seen = s.at("tokens_seen").get<int64_t>();
    nan_skips = s.at("nan_skips").get<int64_t>();
    best_eval_loss =
        s.contains("best_eval_loss") ? std::optional<double>(s.at("best_eval_loss").get<double>()) : std::nullopt;
  }
};

}  // namespace ft::train
