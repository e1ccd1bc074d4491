// Data parallelism through c10d::Reducer, the engine behind torch.nn.parallel.DistributedDataParallel:
// gradients are bucketed (bucket_cap_mb) and all-reduced from autograd hooks while backward still runs.
//
// Per micro-step:   ddp.prepare_for_forward(sync);  loss = forward(...);  ddp.backward(loss);
// with sync = false on gradient-accumulation micro-steps (gradients stay local and accumulate in .grad) and
// sync = true on the last micro-step of an optimizer step (the accumulated .grad is all-reduced once).
//
// Reduction: GradReduction::kSum (default) leaves every rank with the SUM of all ranks' gradients, for a loss
// already normalised by the global token count of the optimizer step (a sum over ranks then equals the
// single-process gradient). It registers a plain all-reduce comm hook, which makes the Reducer skip its
// division by world size. GradReduction::kMean keeps PyTorch's default (gradients averaged over ranks).
// DdpOptions::reduce_dtype = bf16 halves the bytes sent (the hook then also applies kMean's division itself).
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "config/config.h"
#include "dist/comm.h"

namespace c10d {
class Reducer;
}

namespace ft::dist {

enum class GradReduction { kSum, kMean };

struct DdpOptions {
  double bucket_cap_mb = 25.0;               // distributed.bucket_cap_mb
  GradReduction reduction = GradReduction::kSum;
  // kBFloat16: buckets are cast to bf16 for the all-reduce and back (PyTorch's bf16_compress_hook): half the
  // bytes on the wire, at the cost of one bf16 rounding per sum. kFloat: buckets travel in their own dtype.
  at::ScalarType reduce_dtype = at::kFloat;
  bool broadcast_from_rank0 = true;          // copy rank 0's parameter values to every rank at construction

  // distributed.bucket_cap_mb, summed gradients (the loss is normalised over the step's global units), and the
  // reduction dtype the precision policy chose (distributed.reduce_dtype).
  static DdpOptions from_config(const DistributedConfig& cfg, at::ScalarType reduce_dtype);
};

class DistributedDataParallel {
 public:
  // `params`: the TRAINABLE parameters only (requires_grad, dense, one device), in the order forward uses them
  // (module.parameters() order is fine), each shaped as in the model. Frozen weights are neither registered nor
  // broadcast: load them identically on every rank. `comm` must outlive this object.
  DistributedDataParallel(Communicator& comm, std::vector<at::Tensor> params, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Before each forward. `sync` = this micro-step's backward all-reduces (the last micro-step of a step).
  void prepare_for_forward(bool sync = true);
  // After forward, before backward, on a sync micro-step (backward() calls it for you).
  void prepare_for_backward();
  // loss.backward() with the all-reduce when the micro-step syncs; `loss` is a scalar. Backend failures
  // (a lost peer) come out as ft::Error naming the lost rank.
  void backward(const at::Tensor& loss);

  // The gradient buckets the Reducer runs now, in reduction order, each a list of indices into parameters(): after
  // the first synced backward they follow the order in which gradients became ready (the Reducer's rebuild, done
  // right after that backward). Empty on one process.
  std::vector<std::vector<size_t>> buckets() const;
  // Runs the next steps on `buckets` (every parameter index once), as buckets() of the run that wrote a checkpoint
  // returned them. A resumed run then sums each gradient element across ranks in the order that run did; on its
  // initial buckets the first step after a resume would differ in the last bits with more than two ranks (a ring
  // all-reduce's order follows an element's position in its bucket). Every rank calls it with the same buckets.
  void use_buckets(const std::vector<std::vector<size_t>>& buckets);

  bool sync() const { return sync_; }
  int world_size() const { return comm_.world_size(); }
  const std::vector<at::Tensor>& parameters() const { return params_; }
  size_t num_buckets() const { return num_buckets_; }

 private:
  Communicator& comm_;
  std::vector<at::Tensor> params_;       // trainable parameters, any dtype/shape
  std::unique_ptr<c10d::Reducer> reducer_;  // null for a single process
  DdpOptions options_;
  int64_t cap_bytes_ = 0, first_cap_bytes_ = 0;  // distributed.bucket_cap_mb; the first bucket's cap
  // A Reducer over `buckets` (indices into params_, reduction order; `limits`: each one's cap in bytes) with our
  // comm hook.
  std::unique_ptr<c10d::Reducer> make_reducer(std::vector<std::vector<size_t>> buckets,
                                              std::vector<int64_t> limits) const;
  size_t num_buckets_ = 0;
  bool sync_ = true;
  bool backward_prepared_ = false;
};

// Overwrites `tensors` on every rank with rank 0's values (e.g. frozen weights or buffers initialised randomly).
void broadcast_from_rank0(Communicator& comm, std::vector<at::Tensor> tensors);

}  // namespace ft::dist
