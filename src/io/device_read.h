// Reading stored tensor bytes straight onto the device they are used on.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include <array>
#include <cstdint>
#include <optional>

namespace ft::io {

class MappedFile;

// Reads tensors of memory-mapped files onto one device. On the CPU the positioned reads fill each result directly.
// For a GPU they fill two pinned staging buffers in turn, each copied on asynchronously on the current stream, so
// the host reads chunk k + 1 while the copy engine moves chunk k, and several threads read each chunk: the load
// runs at the speed of the reads (docs/platforms.md has the H200 host's numbers). One reader serves a whole
// checkpoint: the buffers are pinned once.
class DeviceReader {
 public:
  explicit DeviceReader(at::Device device);
  ~DeviceReader();
  DeviceReader(const DeviceReader&) = delete;
  DeviceReader& operator=(const DeviceReader&) = delete;

  // A new tensor of `dtype` and `shape` on the device holding bytes [offset, offset + its size) of `file`.
  at::Tensor read(const MappedFile& file, std::uint64_t offset, at::ScalarType dtype, at::IntArrayRef shape);

 private:
  at::Tensor read_through_staging(const MappedFile& file, std::uint64_t offset, int64_t nbytes);

  at::Device device_;
  std::array<at::Tensor, 2> staging_;                // U8 [kChunk] each, pinned; allocated on the first GPU read
  std::array<std::optional<c10::Event>, 2> copied_;  // recorded after each buffer's last copy was queued
  int next_ = 0;                                     // the buffer the next chunk goes through
};

}  // namespace ft::io
