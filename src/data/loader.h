// Micro-batches from a tokenized dataset or preference pairs (a BatchSource): sharded, shuffled per epoch, optionally
// packed, prepared ahead by a background thread, resumable at any batch boundary.
#pragma once

#include <ATen/ATen.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "ckpt/stateful.h"
#include "data/batch.h"
#include "data/batch_source.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace ft::data {

// Greedy packing in `order`: items are appended to the current row while they fit in seq_len; an item that does
// not fit starts the next row. Every item must be at most seq_len tokens (the source enforces it).
RowPlan pack_rows(const BatchSource& source, const std::vector<int64_t>& order, int64_t seq_len);

// Builds the tensors of one batch (CPU). Packing: every row is seq_len long, samples keep their own position ids
// (from 0) and segment ids (0, 1, ... in the row; the padding tail takes the next id). Without packing: rows are
// right-padded to padded_length(longest row, pad_multiple, seq_len), segment_ids stays undefined. Padding: pad_id
// inputs, -100 labels.
Batch collate(const TokenizedDataset& dataset, const RowPlan& rows, const CollateOptions& options);

// data.pad_to_multiple_of resolved: 0 (auto) is 64 on a GPU, where cuDNN attention plans every new batch length
// anew, and 1 on the CPU, whose batches keep their exact shapes (reference comparisons).
int64_t resolve_pad_multiple(int64_t setting, bool cuda);

struct LoaderOptions {
  int64_t micro_batch_size = 8;  // rows per batch
  int64_t seq_len = 512;         // packed row length (>= the dataset's seq_len)
  bool packing = false;
  int64_t pad_id = 0;        // input id of padding (labels are -100 there)
  int64_t pad_multiple = 1;  // without packing: batch length rounded up to a multiple of this (at most seq_len)
  uint64_t seed = 0;         // order of samples (and of packing)
  int64_t rank = 0, world_size = 1;
  int64_t prefetch = 4;     // batches prepared ahead (at least 1)
  bool shuffle = true;      // false: file order every epoch (no reshuffle)
  bool pin_memory = false;  // page-locked host tensors, for asynchronous copies to a GPU

  // train.micro_batch_size, data.seq_len/packing/pad_to_multiple_of/prefetch, run.seed; this rank's place, the
  // tokenizer's pad id, and pinned batches for a GPU run.
  static LoaderOptions from_config(const Config& cfg, int64_t pad_id, int rank, int world_size, bool pin_memory,
                                   bool shuffle);
  // How this layout's rows become tensors (pinned only where CUDA is available).
  CollateOptions collate() const;
};

class DataLoader : public ckpt::Stateful {
 public:
  // Batches stay on the host (pinned when options.pin_memory); the trainer copies them with non_blocking=true.
  DataLoader(std::shared_ptr<const BatchSource> dataset, const LoaderOptions& options);
  // Packing packs the whole dataset once (in an order fixed by `seed`) and shuffles the packed rows per epoch, so
  // every epoch has the same number of batches on every rank. Rows are sharded over (rank, world) by
  // DistributedSampler; the last batch of an epoch may hold fewer rows. `prefetch` (>= 1) batches are prepared
  // ahead; with a CUDA device they are pinned. Unpacked batches keep the length of their longest row.
  DataLoader(std::shared_ptr<const BatchSource> dataset, int64_t micro_batch_size, int64_t seq_len, bool packing,
             int64_t pad_id, uint64_t seed, int64_t rank, int64_t world, int64_t prefetch, at::Device device,
             bool shuffle = true);
  // What a checkpoint keeps of the loader (its "loader" part of trainer_state.json).
  struct State {
    int64_t epoch = 0, batch = 0;  // the next batch next() returns
    uint64_t seed = 0;             // the rest must match on restore: the order of the rows depends on them
    int64_t world = 1;
    bool packing = false;
    int64_t micro_batch_size = 1;
    int64_t samples = 0;  // of the dataset
    // Read with checked integers (util/json_int.h): a damaged trainer_state.json must not convert out of range.
    friend void to_json(nlohmann::json& j, const State& s);
    friend void from_json(const nlohmann::json& j, State& s);
  };

  ~DataLoader() override;
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch (host tensors), or nullopt at the end of an epoch; the call after that starts the next epoch.
  // An exception of the background thread is rethrown here.
  std::optional<Batch> next();
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  int64_t rows_per_rank() const;  // rows (samples, or packed rows) each rank sees per epoch
  int64_t epoch() const { return epoch_; }

  // State as JSON: the position of the next batch next() returns, plus the settings that must match on restore.
  nlohmann::json state_dict() const override;
  // Continues from `state` in O(1): the following batches equal those of an uninterrupted run.
  void load_state_dict(const nlohmann::json& state) override;

 private:
  struct Item {
    std::optional<Batch> batch;  // nullopt: end of epoch
    std::exception_ptr error;
  };
  RowPlan batch_rows(const std::vector<int64_t>& epoch_rows, int64_t b) const;
  std::vector<int64_t> epoch_rows(int64_t epoch) const;  // this rank's row indices for `epoch`
  void start_worker();
  void stop_worker();
  void worker(int64_t epoch, int64_t batch);

  std::shared_ptr<const BatchSource> dataset_;
  int64_t micro_batch_size_;
  CollateOptions collate_;
  uint64_t seed_;
  int64_t rank_, world_, prefetch_;
  bool shuffle_;
  RowPlan packed_;                               // packing: every row of the dataset
  std::unique_ptr<DistributedSampler> sampler_;  // over samples, or over packed rows
  int64_t batches_per_epoch_ = 0;

  int64_t epoch_ = 0, batch_ = 0;  // position of the next batch handed out
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::exception_ptr failed_;  // the worker's error, rethrown by every later next()
};

}  // namespace ft::data
