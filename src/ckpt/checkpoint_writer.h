// Saving one checkpoint from every rank into the store: synchronously, or in the background (async_save.h) while
// training goes on. Every rank calls save() at the same step; rank 0 owns the directory (CheckpointStore) and
// publishes it once every rank that writes has reported its files complete.
//
// Ranks other than 0 report through marker files in the checkpoint's temporary directory (one filesystem for all
// ranks, as ZeRO-1 shards already require), so a background write needs no collective off the training thread:
//   .done-rank<r>     rank r's files are written; the file holds their digests (JSON: path -> size, sha256)
//   .failed-rank<r>   rank r could not write them; the file holds the reason
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "ckpt/async_save.h"
#include "ckpt/checkpoint_store.h"
#include "config/config.h"

namespace ft::dist {
class Communicator;
}

namespace ft::ckpt {

using NamedTensors = std::map<std::string, at::Tensor>;

// What this rank writes into one checkpoint.
struct SaveRequest {
  int64_t step = 0;
  std::optional<double> metric;  // ranks the checkpoint for keep_best (rank 0)
  // Every tensor `write` reads, by a name unique within the save: the live tensors for a synchronous save, host
  // copies taken at the call for a background one.
  NamedTensors tensors;
  // Writes this rank's files into the checkpoint directory being built; returns the digests its writers computed
  // (the manifest hashes the other files itself). Runs on the background thread for a background save: it may read
  // only `tensors` and what it captured by value.
  std::function<FileDigests(const std::filesystem::path& dir, const NamedTensors& tensors)> write;
};

struct CheckpointWriterOptions {
  bool background = false;     // write while training goes on (falls back to synchronous when host memory is short)
  bool every_rank_writes = false;  // ranks other than 0 write files too (ZeRO-1 optimizer shards)
  double timeout_s = 600;      // how long rank 0 waits for the other ranks' files

  // checkpoint.async (auto: in the background on a GPU) and distributed.timeout_s; `sharded`: ZeRO-1.
  static CheckpointWriterOptions from_config(const Config& cfg, c10::Device device, bool sharded);
};

class CheckpointWriter {
 public:
  // `store` is rank 0's (null on the other ranks).
  CheckpointWriter(std::unique_ptr<CheckpointStore> store, std::shared_ptr<dist::Communicator> comm, int rank,
                   int world_size, CheckpointWriterOptions opts);
  // Waits for the save in flight.
  ~CheckpointWriter();

  // Collective. Waits for the previous save, then writes `request` (in the background when so configured) and on rank
  // 0 commits the directory. Throws ft::Error for a failed save (the previous background one, or this synchronous
  // one): "checkpoint of step N not saved: ...", with the newest intact checkpoint in the hint.
  void save(SaveRequest request);
  // Makes the host memory for background saves of tensors like `tensors` on the writer thread, so that the first
  // save does not wait for it (pinning memory takes about as long as writing it). No-op for synchronous saves.
  void prepare(const NamedTensors& tensors);
  // Waits until the save in flight is on disk and published; rethrows its failure.
  void wait();
  // Rethrows the failure of a background save that has ended, without waiting.
  void rethrow_failure();

 private:
  void write_and_commit(const SaveRequest& request, const std::filesystem::path& dir);
  // Rank 0: waits for every other rank's marker and adds the digests of their files to `digests`.
  void wait_for_ranks(const std::filesystem::path& dir, FileDigests& digests) const;
  bool stage(SaveRequest& request);      // false: not enough host memory, write synchronously
  bool host_has_room(int64_t bytes);     // warns once when not

  std::unique_ptr<CheckpointStore> store_;
  std::shared_ptr<dist::Communicator> comm_;
  int rank_;
  int world_size_;
  CheckpointWriterOptions opts_;
  HostStaging staging_;
  bool memory_warned_ = false;
  std::unique_ptr<BackgroundWriter> writer_;  // last: joined first, while the members above still exist
};

}  // namespace ft::ckpt
