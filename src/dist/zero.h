// ZeRO-1 building blocks: the trainable parameters laid out in one flat buffer, cut into world_size equal
// shards; each rank keeps optimizer state for its own shard only, updates it, and all-gathers the parameters.
//
// Step with DDP (gradients already all-reduced by the Reducer):   g = zero.local_grad_shard();
// Step without DDP's all-reduce (plain local backward):           g = zero.reduce_scatter_grads();
// then: p = zero.param_shard(); optimizer step on (p, g) — per-parameter views from zero.views(p), zero.views(g)
// keep per-parameter hyperparameters (e.g. no weight decay on norms) — then zero.all_gather_params(p).
// Communication per step: reduce-scatter + all-gather = one all-reduce; optimizer memory / world_size.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "dist/comm.h"

namespace ft::dist {

class ZeroShards {
 public:
  // `params`: trainable parameters, one dtype and device. `comm` must outlive this object.
  ZeroShards(Communicator& comm, std::vector<at::Tensor> params);

  int64_t total_numel() const { return total_; }        // sum of parameter sizes
  int64_t shard_numel() const { return shard_; }        // ceil(total / world_size): the last shard is padded
  int64_t shard_begin() const { return shard_ * comm_.rank(); }  // this shard's offset in the flat layout

  // This rank's slice of the parameter values: a new tensor, params' dtype [shard_numel] (zero padding).
  at::Tensor param_shard() const;
  // This rank's slice of the (already reduced) gradients, params' dtype [shard_numel]; missing grads count as 0.
  at::Tensor local_grad_shard() const;
  // Reduce-scatter (sum, or avg) of every rank's local gradients: this rank's slice [shard_numel].
  at::Tensor reduce_scatter_grads(ReduceOp op = ReduceOp::kSum) const;
  // Writes every rank's updated shard [shard_numel] back into the parameters (all-gather).
  void all_gather_params(const at::Tensor& shard) const;

  // Views into `shard` [shard_numel], one per parameter that overlaps this shard: (parameter index, 1-D view).
  std::vector<std::pair<size_t, at::Tensor>> views(const at::Tensor& shard) const;
  // sqrt of the sum over all ranks of |shard|^2, e.g. the global gradient norm for clipping (F32 scalar).
  at::Tensor global_norm(const at::Tensor& shard) const;

 private:
  at::Tensor flatten(bool grads) const;  // [shard_numel * world_size], padded

  Communicator& comm_;
  std::vector<at::Tensor> params_;
  std::vector<int64_t> offsets_;  // flat offset of each parameter
  int64_t total_ = 0;
  int64_t shard_ = 0;
};

}  // namespace ft::dist
