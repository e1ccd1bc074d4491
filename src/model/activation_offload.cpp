#include "model/activation_offload.h"

#include <deque>

#ifdef FT_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "util/error.h"
#include "util/log.h"

namespace ft::model {

#ifdef FT_WITH_CUDA

struct OffloadChain::InFlight {
  struct Copy {
    at::Tensor source;         // the device input the copy reads
    at::cuda::CUDAEvent done;  // recorded on the side stream after the copy
  };
  std::deque<Copy> copies;
};

namespace {

c10::cuda::CUDAStream stream_of(int64_t id, int64_t index, int64_t type) {
  return c10::cuda::CUDAStream::unpack3(id, static_cast<c10::DeviceIndex>(index), static_cast<c10::DeviceType>(type));
}

// `waiting` waits for the work queued on `done` so far (no host sync).
void wait_for(const c10::cuda::CUDAStream& waiting, const c10::cuda::CUDAStream& done) {
  at::cuda::CUDAEvent event;
  event.record(done);
  event.block(waiting);
}

}  // namespace

OffloadChain OffloadChain::on(at::Device device) {
  OffloadChain chain;
  if (!device.is_cuda()) return chain;
  const c10::StreamData3 packed = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()).pack3();
  chain.stream_id_ = packed.stream_id;
  chain.device_index_ = packed.device_index;
  chain.device_type_ = static_cast<int64_t>(packed.device_type);
  return chain;
}

OffloadChain::~OffloadChain() {
  if (!in_flight_ || in_flight_->copies.empty()) return;
  const c10::cuda::CUDAStream side = stream_of(stream_id_, device_index_, device_type_);
  for (const InFlight::Copy& copy : in_flight_->copies) {
    try {  // the block is handed back now: the allocator keeps it until the side stream's copy is done
      c10::cuda::CUDACachingAllocator::recordStream(copy.source.storage().data_ptr(), side);
    } catch (const std::exception& e) {
      FT_LOG_WARN("activation offload: a layer input's block could not wait for its copy: {}", first_line(e));
    }
  }
}

OffloadedInput OffloadChain::offload(const at::Tensor& x) {
  OffloadedInput slot;
  if (!moves() || !x.is_cuda()) {
    slot.kept = x;
    return slot;
  }
  const c10::cuda::CUDAStream side = stream_of(stream_id_, device_index_, device_type_);
  const at::Tensor source = x.contiguous();  // [B, T, hidden]
  wait_for(side, c10::cuda::getCurrentCUDAStream(source.device().index()));
  slot.host = at::empty(source.sizes(), source.options().device(at::kCPU).pinned_memory(true));
  InFlight::Copy copy{source, at::cuda::CUDAEvent()};
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    slot.host.copy_(source, /*non_blocking=*/true);
    copy.done.record(side);
  }
  in_flight_->copies.push_back(std::move(copy));
  while (in_flight_->copies.size() > kInFlight) {  // the file comment says why the host waits here
    in_flight_->copies.front().done.synchronize();
    in_flight_->copies.pop_front();  // the copy has read the block: the allocator may hand it out again at once
  }
  slot.prefetched = at::empty({0}, source.options());
  return slot;
}

at::Tensor OffloadChain::restore(const OffloadedInput& slot, at::Device device) const {
  if (!slot.offloaded()) return slot.kept;
  // The offload (and a prefetch) are done before the compute stream reads.
  wait_for(c10::cuda::getCurrentCUDAStream(device.index()), stream_of(stream_id_, device_index_, device_type_));
  if (slot.prefetched.sizes() == slot.host.sizes()) return slot.prefetched;
  return slot.host.to(device, /*non_blocking=*/true);
}

void OffloadChain::prefetch(const OffloadedInput& slot, at::Device device) const {
  if (!slot.offloaded() || slot.prefetched.sizes() == slot.host.sizes()) return;
  FT_CHECK(slot.prefetched.device() == device, "activation offload: the prefetch target is on another device");
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device.index());
  const c10::cuda::CUDAStream side = stream_of(stream_id_, device_index_, device_type_);
  // Allocated on the compute stream, which reads and frees it after restore(): the side stream writes it only after
  // the compute stream's earlier work (a previous owner of the block is done with it).
  at::Tensor target = slot.prefetched;  // shares its TensorImpl with the layer's slot: resized in place
  target.resize_(slot.host.sizes());
  wait_for(side, current);
  const c10::cuda::CUDAStreamGuard on_side(side);
  target.copy_(slot.host, /*non_blocking=*/true);
}

#else  // no CUDA: nothing moves

struct OffloadChain::InFlight {};

OffloadChain OffloadChain::on(at::Device) {
  return {};
}

OffloadChain::~OffloadChain() = default;

OffloadedInput OffloadChain::offload(const at::Tensor& x) {
  OffloadedInput slot;
  slot.kept = x;
  return slot;
}

at::Tensor OffloadChain::restore(const OffloadedInput& slot, at::Device) const {
  return slot.kept;
}

void OffloadChain::prefetch(const OffloadedInput&, at::Device) const {}

#endif

OffloadChain::OffloadChain() : in_flight_(std::make_unique<InFlight>()) {}
OffloadChain::OffloadChain(OffloadChain&&) noexcept = default;
OffloadChain& OffloadChain::operator=(OffloadChain&&) noexcept = default;

OffloadChain OffloadChain::of_stream(const std::vector<int64_t>& packed) {
  FT_CHECK(packed.size() == 3, "activation offload: a saved stream is three numbers");
  OffloadChain chain;
  chain.stream_id_ = packed[0];
  chain.device_index_ = packed[1];
  chain.device_type_ = packed[2];
  return chain;
}

std::vector<int64_t> OffloadChain::packed_stream() const {
  return {stream_id_, device_index_, device_type_};
}

}  // namespace ft::model
