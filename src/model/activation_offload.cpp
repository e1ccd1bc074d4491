#include "model/activation_offload.h"

#ifdef FT_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "util/error.h"

namespace ft::model {

#ifdef FT_WITH_CUDA
namespace {

c10::cuda::CUDAStream side_stream(const OffloadChain& chain) {
  return c10::cuda::CUDAStream::unpack3(chain.stream_id, static_cast<c10::DeviceIndex>(chain.device_index),
                                        static_cast<c10::DeviceType>(chain.device_type));
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
  const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  const c10::StreamData3 packed = stream.pack3();
  chain.stream_id = packed.stream_id;
  chain.device_index = packed.device_index;
  chain.device_type = static_cast<int64_t>(packed.device_type);
  return chain;
}

OffloadedInput offload_input(const at::Tensor& x, const OffloadChain& chain) {
  OffloadedInput slot;
  if (!chain.moves() || !x.is_cuda()) {
    slot.kept = x;
    return slot;
  }
  const c10::cuda::CUDAStream side = side_stream(chain);
  const at::Tensor source = x.contiguous();  // [B, T, hidden]
  wait_for(side, c10::cuda::getCurrentCUDAStream(source.device().index()));
  slot.host = at::empty(source.sizes(), source.options().device(at::kCPU).pinned_memory(true));
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    slot.host.copy_(source, /*non_blocking=*/true);
  }
  // The compute stream may free `source` before the copy has read it: its block waits for the side stream.
  c10::cuda::CUDACachingAllocator::recordStream(source.storage().data_ptr(), side);
  slot.prefetched = at::empty({0}, source.options());
  return slot;
}

at::Tensor restore_input(const OffloadedInput& slot, const OffloadChain& chain, at::Device device) {
  if (!slot.offloaded()) return slot.kept;
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device.index());
  wait_for(current, side_stream(chain));  // the offload (and a prefetch) are done before the compute stream reads
  if (slot.prefetched.sizes() == slot.host.sizes()) {
    // Allocated on the side stream, read and freed after this on the compute stream.
    c10::cuda::CUDACachingAllocator::recordStream(slot.prefetched.storage().data_ptr(), current);
    return slot.prefetched;
  }
  return slot.host.to(device, /*non_blocking=*/true);
}

void prefetch_input(const OffloadedInput& slot, const OffloadChain& chain, at::Device device) {
  if (!slot.offloaded() || slot.prefetched.sizes() == slot.host.sizes()) return;
  FT_CHECK(slot.prefetched.device() == device, "activation offload: the prefetch target is on another device");
  const c10::cuda::CUDAStreamGuard on_side(side_stream(chain));
  at::Tensor target = slot.prefetched;  // shares its TensorImpl with the layer's slot: resized in place
  target.resize_(slot.host.sizes());
  target.copy_(slot.host, /*non_blocking=*/true);
}

#else  // no CUDA: nothing moves

OffloadChain OffloadChain::on(at::Device) {
  return {};
}

OffloadedInput offload_input(const at::Tensor& x, const OffloadChain&) {
  OffloadedInput slot;
  slot.kept = x;
  return slot;
}

at::Tensor restore_input(const OffloadedInput& slot, const OffloadChain&, at::Device) {
  return slot.kept;
}

void prefetch_input(const OffloadedInput&, const OffloadChain&, at::Device) {}

#endif

}  // namespace ft::model
