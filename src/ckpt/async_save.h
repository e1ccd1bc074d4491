// Checkpoints written while training goes on (checkpoint.async). At a save step the trainer copies every tensor the
// checkpoint holds into host buffers (HostStaging: pinned memory for GPU tensors, enqueued on the current stream, so
// the next step's kernels run after the copies and the GPU never waits for the disk), then hands the writing to one
// background thread (BackgroundWriter). At most one save is in flight: the next save waits for the previous one.
// Crash safety is CheckpointStore's: a save becomes a checkpoint only when its directory is renamed into place, so a
// kill -9 during the background write leaves the previous checkpoint valid and the partial one ignored.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace ft::ckpt {

// Host copies of the tensors of one save, in host blocks kept between saves: pinned memory for GPU sources, so that
// the copies are asynchronous DMA on the current stream. Pinning takes about as long as writing the same bytes to
// disk, and while the driver pins a block other threads' CUDA calls wait, so the blocks are made one at a time (a
// tensor of 16 MB or more gets a block of its own size, smaller ones share 64 MB blocks) and, for the first save, on
// the writer thread ahead of time. A round of copies overwrites the previous round's.
class HostStaging {
 public:
  // Plans a round of copies of tensors of `bytes` (in the order stage() will get them) and makes the blocks the plan
  // needs, keeping those of an earlier identical plan. `pinned` for GPU sources. May run on another thread than
  // stage(), never at the same time.
  void reserve(const std::vector<int64_t>& bytes, bool pinned);
  // A host tensor equal to `tensor` once wait_copied() returns: for a GPU tensor the copy is enqueued on the current
  // stream (non-blocking, into pinned memory); a CPU tensor is copied now. The i-th call after reserve() takes the
  // place planned for its i-th size.
  at::Tensor stage(const at::Tensor& tensor);
  // Ends the round: records an event after the copies on every device that had one.
  void record();
  // Blocks until the copies of the last round are done. Safe to call from another thread than stage().
  void wait_copied();
  // Bytes of the blocks held.
  int64_t capacity() const;

 private:
  struct Place {
    size_t block = 0;
    int64_t offset = 0;
    int64_t bytes = 0;
  };
  std::vector<at::Tensor> blocks_;  // U8 [n] each
  std::vector<Place> places_;       // the plan of the current round, one per tensor
  bool pinned_ = false;
  size_t next_ = 0;                 // the next place to fill in this round
  std::vector<c10::Device> devices_;  // devices with a copy in this round
  std::vector<c10::Event> copied_;
};

// The byte size of every tensor of `tensors`, in their order: what HostStaging::reserve plans for.
std::vector<int64_t> tensor_sizes(const std::map<std::string, at::Tensor>& tensors);

// The memory the kernel could still give this process (MemAvailable of /proc/meminfo), in bytes; nullopt when it
// cannot be read.
std::optional<int64_t> host_memory_available();

// One background thread that runs one job at a time.
class BackgroundWriter {
 public:
  BackgroundWriter();
  // Waits for the job in flight (a SIGINT or the end of a run must not cut a checkpoint short); its failure, if not
  // taken by wait(), is logged.
  ~BackgroundWriter();
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  // Starts `job` once the previous one is done; returns the seconds spent waiting for it. Rethrows the previous job's
  // failure instead of starting (the caller decides what a failed save means).
  double submit(std::function<void()> job);
  // Waits for the job in flight and rethrows its failure, once. Returns the seconds waited.
  double wait();
  // Rethrows the failure of a job that has ended (once), without waiting.
  void rethrow_if_failed();
  // True while a job runs.
  bool busy() const;

 private:
  void loop();

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> job_;     // set: a job waits or runs
  std::exception_ptr failure_;    // the last job's failure, until wait() or submit() takes it
  bool stopping_ = false;
  std::thread thread_;            // last: starts after the members above exist
};

}  // namespace ft::ckpt
