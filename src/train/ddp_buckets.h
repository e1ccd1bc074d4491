// The "ddp" part of trainer_state.json: DDP's gradient buckets (dist::DistributedDataParallel::buckets), so that a
// resumed run all-reduces every gradient element as the run that wrote the checkpoint did. Empty on one process and
// before the first step; checkpoints written before this part existed have none, and a run resumed from them starts
// on DDP's initial buckets.
#pragma once

#include <vector>

#include "ckpt/stateful.h"
#include "dist/ddp.h"
#include "util/json_int.h"

namespace ft::train {

class DdpBuckets final : public ckpt::Stateful {
 public:
  explicit DdpBuckets(dist::DistributedDataParallel* ddp) : ddp_(ddp) {}

  nlohmann::json state_dict() const override {
    return {{"buckets", ddp_ != nullptr ? ddp_->buckets() : std::vector<std::vector<size_t>>{}}};
  }

  void load_state_dict(const nlohmann::json& state) override {
    std::vector<std::vector<size_t>> buckets;
    for (const auto& bucket : state.at("buckets")) {
      std::vector<size_t>& ids = buckets.emplace_back();
      for (const auto& id : bucket) ids.push_back(json_integer<size_t>(id, "ddp.buckets"));
    }
    if (buckets.empty() || ddp_ == nullptr) return;  // saved before the first step, or resumed on one process
    ddp_->use_buckets(buckets);
  }

 private:
  dist::DistributedDataParallel* ddp_;  // null on one process
};

}  // namespace ft::train
