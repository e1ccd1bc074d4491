// model.activation_offload: the layer inputs that activation checkpointing keeps between forward and backward (one
// [B, T, hidden] tensor per decoder layer, model/activation_checkpointing.cpp) move to pinned host memory, so the GPU
// holds none of them; at 70B (80 layers x [1, 8192, 8192] bf16) that is 10 GiB.
//
// Forward: a layer's input is copied to the host on the chain's side stream, which first waits for the work queued
// on the compute stream (the copy reads finished values); the compute stream goes on with the next layer meanwhile.
// The chain keeps the device tensor until its copy is done, and the host waits for the oldest copy once more than
// kInFlight are pending. Why the host waits: the CPU runs ahead of the GPU by many layers, and the caching allocator
// counts by the CPU's clock. A block handed to the allocator with a side-stream use pending (recordStream) stays
// allocated, and cannot be reused, until the host sees that use done; with the CPU layers ahead, every layer's input
// was still pending at the forward's peak (measured on the 70B layer shape at 8,192 tokens: the same peak as without
// offload, and twice the reserved memory). Waiting for the copy of the layer two back costs the GPU nothing: it has
// the layers after it queued.
// Backward runs the layers in reverse. Layer i+1's backward starts copying layer i's input back (prefetch) on the
// side stream, into a device tensor the two layers' autograd nodes share (`prefetched`, empty until then), allocated
// on the compute stream that reads and frees it; layer i's backward makes the compute stream wait for the side stream
// and takes it. The last layer's input, and any input no prefetch reached, is copied back on the compute stream.
// Where nothing would move (CPU tensors, a build without CUDA) the input is kept as it is.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ft::model {

// One layer input: offloaded (`host` and `prefetched` defined) or `kept`.
struct OffloadedInput {
  at::Tensor host;        // pinned copy [B, T, hidden]
  at::Tensor prefetched;  // on the device: 0 elements until the next layer's backward prefetches into it
  at::Tensor kept;        // the input itself, where nothing moves
  bool offloaded() const { return host.defined(); }
};

// The side stream of one forward's offloads, the copies in flight on it, and the slot of the layer before (what a
// layer's backward prefetches). Its stream travels in autograd nodes as the three numbers of c10::Stream::pack3().
class OffloadChain {
 public:
  // Device inputs whose copy to the host may be pending at once (the host waits for the oldest beyond that).
  static constexpr size_t kInFlight = 2;

  OffloadChain();
  OffloadChain(OffloadChain&&) noexcept;
  OffloadChain& operator=(OffloadChain&&) noexcept;
  ~OffloadChain();  // the copies still in flight keep their device blocks until done (recordStream)

  // A side stream from `device`'s pool (none where nothing moves).
  static OffloadChain on(at::Device device);
  // The chain of a stream saved with packed_stream() (a layer's backward: no copies in flight).
  static OffloadChain of_stream(const std::vector<int64_t>& packed);
  std::vector<int64_t> packed_stream() const;
  bool moves() const { return device_type_ >= 0; }

  // Starts copying x [B, T, hidden] to pinned host memory on the side stream (keeps x where nothing moves).
  OffloadedInput offload(const at::Tensor& x);
  // The input of `slot` on `device`, for the recompute: the prefetched copy, else copied now on the compute stream;
  // both after every copy queued on the side stream so far.
  at::Tensor restore(const OffloadedInput& slot, at::Device device) const;
  // Starts copying `slot` (the layer before's) back to `device` on the side stream, into slot.prefetched.
  void prefetch(const OffloadedInput& slot, at::Device device) const;

  OffloadedInput previous;  // of the layer before, while the forward runs

 private:
  struct InFlight;  // the device inputs whose copies are pending, oldest first (CUDA events)
  int64_t stream_id_ = 0, device_index_ = 0, device_type_ = -1;  // c10::Stream::pack3(); device_type_ < 0: none
  std::unique_ptr<InFlight> in_flight_;
};

}  // namespace ft::model
