#include "ckpt/async_save.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <utility>

#include "util/cuda_check.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::ckpt {
namespace {

constexpr int64_t kAlign = 64;                    // bytes; every place starts at a multiple
constexpr int64_t kOwnBlock = int64_t{16} << 20;  // tensors this large get a block of their own
constexpr int64_t kSharedBlock = int64_t{64} << 20;

int64_t aligned(int64_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

// `bytes` of host memory; page-locked through the CUDA runtime when `pinned` (exactly that size: the caching host
// allocator would round every block up to a power of two).
at::Tensor host_block(int64_t bytes, bool pinned) {
#ifdef FT_WITH_CUDA
  if (pinned) {
    void* ptr = nullptr;
    FT_CHECK_CUDA(cudaHostAlloc(&ptr, static_cast<size_t>(bytes), cudaHostAllocDefault));
    return at::from_blob(
        ptr, {bytes}, [](void* p) { cudaFreeHost(p); }, at::TensorOptions().dtype(at::kByte));
  }
#endif
  return at::empty({bytes}, at::kByte);
}

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

std::vector<int64_t> tensor_sizes(const std::map<std::string, at::Tensor>& tensors) {
  std::vector<int64_t> out;
  out.reserve(tensors.size());
  for (const auto& [name, t] : tensors) out.push_back(static_cast<int64_t>(t.numel()) * t.element_size());
  return out;
}

void HostStaging::reserve(const std::vector<int64_t>& bytes, bool pinned) {
  std::vector<Place> places;
  std::vector<int64_t> block_sizes;
  // The shared block being filled; own blocks may be added after it while it still has room.
  size_t shared_block = 0;
  int64_t shared_used = kSharedBlock;  // no shared block open yet
  for (const int64_t b : bytes) {
    const int64_t size = aligned(b);
    if (size >= kOwnBlock) {
      places.push_back({block_sizes.size(), 0, b});
      block_sizes.push_back(size);
      continue;
    }
    if (shared_used + size > kSharedBlock) {
      shared_block = block_sizes.size();
      block_sizes.push_back(kSharedBlock);
      shared_used = 0;
    }
    places.push_back({shared_block, shared_used, b});
    shared_used += size;
  }
  next_ = 0;
  places_ = std::move(places);
  bool same = pinned == pinned_ && block_sizes.size() == blocks_.size();
  for (size_t i = 0; same && i < blocks_.size(); ++i) same = blocks_[i].numel() == block_sizes[i];
  if (same) return;
  blocks_.clear();  // the old blocks go before the new ones are made
  pinned_ = pinned;
  for (const int64_t size : block_sizes) blocks_.push_back(host_block(size, pinned));
}

at::Tensor HostStaging::stage(const at::Tensor& tensor) {
  const at::Tensor t = tensor.detach();
  const int64_t bytes = static_cast<int64_t>(t.numel()) * t.element_size();
  FT_CHECK(next_ < places_.size() && places_[next_].bytes == bytes,
           "HostStaging::stage: the tensors differ from those reserve() planned for");
  const Place& place = places_[next_++];
  at::Tensor buffer =
      blocks_[place.block].narrow(0, place.offset, bytes).view(t.scalar_type()).view(t.sizes());
  if (t.device().is_cpu()) {
    buffer.copy_(t);
  } else {
    buffer.copy_(t, /*non_blocking=*/true);
    if (std::find(devices_.begin(), devices_.end(), t.device()) == devices_.end()) devices_.push_back(t.device());
  }
  return buffer;
}

void HostStaging::record() {
  copied_.clear();
  for (const c10::Device& device : devices_) {
    c10::impl::VirtualGuardImpl impl(device.type());
    c10::Event event(device.type());
    event.record(impl.getStream(device));
    copied_.push_back(std::move(event));
  }
  devices_.clear();
}

void HostStaging::wait_copied() {
  for (const auto& event : copied_) event.synchronize();
}

int64_t HostStaging::capacity() const {
  int64_t total = 0;
  for (const auto& b : blocks_) total += b.numel();
  return total;
}

std::optional<int64_t> host_memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    int64_t kib = 0;
    if (fields >> kib) return kib * 1024;
  }
  return std::nullopt;
}

BackgroundWriter::BackgroundWriter() : thread_([this] { loop(); }) {}

BackgroundWriter::~BackgroundWriter() {
  try {
    wait();
  } catch (const std::exception& e) {
    FT_LOG_WARN("background checkpoint write failed: {}", e.what());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

double BackgroundWriter::submit(std::function<void()> job) {
  const double waited = wait();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = std::move(job);
  }
  changed_.notify_all();
  return waited;
}

double BackgroundWriter::wait() {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !job_; });
  const double waited = seconds_between(start, std::chrono::steady_clock::now());
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
  return waited;
}

void BackgroundWriter::rethrow_if_failed() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

bool BackgroundWriter::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<bool>(job_);
}

void BackgroundWriter::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stopping_ || job_; });
    if (!job_) return;  // stopping, nothing left to write
    std::function<void()> job = job_;
    lock.unlock();
    std::exception_ptr failure;
    try {
      job();
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    failure_ = failure;
    job_ = nullptr;
    changed_.notify_all();
  }
}

}  // namespace ft::ckpt
