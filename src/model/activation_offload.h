// model.activation_offload: the layer inputs that activation checkpointing keeps between forward and backward (one
// [B, T, hidden] tensor per decoder layer, model/activation_checkpointing.cpp) move to pinned host memory, so the GPU
// holds none of them; at 70B (80 layers x [1, 8192, 8192] bf16) that is 10 GiB.
//
// Forward: a layer's input is copied to the host on the chain's side stream, which first waits for the work queued
// on the compute stream (the copy reads finished values); the compute stream goes on with the next layer meanwhile.
// The caching allocator is told that the side stream uses the input (recordStream), so its memory is not handed out
// again before the copy is done.
// Backward runs the layers in reverse. Layer i+1's backward starts copying layer i's input back (prefetch) on the
// side stream, into a device tensor the two layers' autograd nodes share (`prefetched`, empty until then), and goes
// on with its own recompute; layer i's backward makes the compute stream wait for the side stream and takes it.
// The last layer's input, and any input no prefetch reached, is copied back on the compute stream.
// Where nothing would move (CPU tensors, a build without CUDA) the input is kept as it is.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace ft::model {

// One layer input: offloaded (`host` and `prefetched` defined) or `kept`.
struct OffloadedInput {
  at::Tensor host;        // pinned copy [B, T, hidden]
  at::Tensor prefetched;  // on the device: 0 elements until the next layer's backward prefetches into it
  at::Tensor kept;        // the input itself, where nothing moves
  bool offloaded() const { return host.defined(); }
};

// The side stream of one forward's offloads, and the slot of the layer before (what a layer's backward prefetches).
// Its stream travels in autograd nodes as the three numbers of c10::Stream::pack3().
struct OffloadChain {
  int64_t stream_id = 0, device_index = 0, device_type = -1;  // c10::Stream::pack3(); device_type < 0: none
  OffloadedInput previous;                                    // of the layer before, while the forward runs

  // A side stream from `device`'s pool (none where nothing moves).
  static OffloadChain on(at::Device device);
  bool moves() const { return device_type >= 0; }
};

// Starts copying x [B, T, hidden] to pinned host memory on the chain's side stream (keeps x where nothing moves).
OffloadedInput offload_input(const at::Tensor& x, const OffloadChain& chain);
// The input of `slot` on `device`, for the recompute: the prefetched copy, else copied now on the compute stream;
// both after every copy queued on the chain's side stream so far.
at::Tensor restore_input(const OffloadedInput& slot, const OffloadChain& chain, at::Device device);
// Starts copying `slot` (the layer before's) back to `device` on the side stream, into slot.prefetched.
void prefetch_input(const OffloadedInput& slot, const OffloadChain& chain, at::Device device);

}  // namespace ft::model
