#include "io/device_read.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>

#include "io/mapped_file.h"

namespace ft::io {
namespace {

// 64 MiB per staging buffer: each chunk is split over the reading threads in 8 MiB pieces (MappedFile::read).
constexpr int64_t kChunk = int64_t{64} << 20;

c10::Stream current_stream(at::Device device) {
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
}

}  // namespace

DeviceReader::DeviceReader(at::Device device) : device_(device) {}

DeviceReader::~DeviceReader() {
  // The pinned buffers must outlive the copies out of them.
  for (auto& event : copied_) {
    if (event) event->synchronize();
  }
}

at::Tensor DeviceReader::read(const MappedFile& file, std::uint64_t offset, at::ScalarType dtype,
                              at::IntArrayRef shape) {
  if (!device_.is_cuda()) {
    at::Tensor out = at::empty(shape, at::TensorOptions().dtype(dtype));
    file.read(offset, out.data_ptr(), out.nbytes());
    return out.to(device_);
  }
  const int64_t nbytes = c10::multiply_integers(shape) * static_cast<int64_t>(c10::elementSize(dtype));
  return read_through_staging(file, offset, nbytes).view(dtype).view(shape);
}

// U8 [nbytes] on the GPU.
at::Tensor DeviceReader::read_through_staging(const MappedFile& file, std::uint64_t offset, int64_t nbytes) {
  at::Tensor bytes = at::empty({nbytes}, at::TensorOptions().dtype(at::kByte).device(device_));
  if (!staging_[0].defined() && nbytes > 0) {
    for (auto& buffer : staging_)
      buffer = at::empty({kChunk}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    for (auto& event : copied_) event.emplace(device_.type());
  }
  const c10::Stream stream = current_stream(device_);
  for (int64_t done = 0; done < nbytes; done += kChunk) {
    const int64_t n = std::min(kChunk, nbytes - done);
    copied_[next_]->synchronize();  // the buffer's previous chunk has left it
    at::Tensor staging = staging_[next_].narrow(0, 0, n);
    file.read(offset + static_cast<std::uint64_t>(done), staging.data_ptr(), static_cast<std::size_t>(n));
    bytes.narrow(0, done, n).copy_(staging, /*non_blocking=*/true);
    copied_[next_]->record(stream);
    next_ = 1 - next_;
  }
  return bytes;
}

}  // namespace ft::io
