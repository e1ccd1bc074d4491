#include "data/loader.h"

#include <numeric>

#include "util/error.h"
#include "util/fmt.h"
#include "util/json_int.h"

namespace ft::data {

LoaderOptions LoaderOptions::from_config(const Config& cfg, int64_t pad_id, int rank, int world_size, bool pin_memory,
                                         bool shuffle) {
  LoaderOptions o;
  o.micro_batch_size = cfg.train.micro_batch_size;
  o.seq_len = cfg.data.seq_len;
  o.packing = cfg.data.packing;
  o.pad_id = pad_id;
  o.pad_multiple = resolve_pad_multiple(cfg.data.pad_to_multiple_of, /*cuda=*/pin_memory);
  o.seed = static_cast<uint64_t>(cfg.run.seed);
  o.rank = rank;
  o.world_size = world_size;
  o.prefetch = cfg.data.prefetch;
  o.shuffle = shuffle;
  o.pin_memory = pin_memory;
  return o;
}

CollateOptions LoaderOptions::collate() const {
  return CollateOptions{seq_len, packing, pad_id, pad_multiple, pin_memory && at::hasCUDA()};
}

int64_t resolve_pad_multiple(int64_t setting, bool cuda) {
  if (setting > 0) return setting;
  return cuda ? 64 : 1;
}

RowPlan pack_rows(const BatchSource& dataset, const std::vector<int64_t>& order, int64_t seq_len) {
  RowPlan rows;
  int64_t used = seq_len + 1;  // forces a new row first
  for (int64_t i : order) {
    const int64_t len = dataset.length(i);
    FT_CHECK(len <= seq_len, fmt::format("item {} has {} tokens, more than seq_len {}", i, len, seq_len));
    if (used + len > seq_len) {
      rows.emplace_back();
      used = 0;
    }
    rows.back().push_back(i);
    used += len;
  }
  return rows;
}

Batch collate(const TokenizedDataset& dataset, const RowPlan& rows, const CollateOptions& options) {
  const auto& [seq_len, packing, pad_id, pad_multiple, pin_memory] = options;
  const auto B = static_cast<int64_t>(rows.size());
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<uint8_t>> loss;
  std::vector<int64_t> row_len(static_cast<size_t>(B), 0);
  int64_t longest = 0, n_samples = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i : rows[static_cast<size_t>(b)]) {
      tokens.emplace_back();
      loss.emplace_back();
      dataset.get(i, tokens.back(), loss.back());
      row_len[static_cast<size_t>(b)] += static_cast<int64_t>(tokens.back().size());
      ++n_samples;
    }
    longest = std::max(longest, row_len[static_cast<size_t>(b)]);
  }
  const int64_t T = packing ? seq_len : padded_length(longest, pad_multiple, seq_len);
  FT_CHECK(longest <= T, "a packed row exceeds seq_len");
  auto opts = at::TensorOptions().dtype(at::kLong);
  at::Tensor input = at::full({B, T}, pad_id, opts);
  at::Tensor labels = at::full({B, T}, kIgnoreIndex, opts);
  at::Tensor pos = at::empty({B, T}, opts);
  at::Tensor seg = packing ? at::empty({B, T}, opts.dtype(at::kInt)) : at::Tensor();
  int64_t* in_p = input.data_ptr<int64_t>();
  int64_t* lab_p = labels.data_ptr<int64_t>();
  int64_t* pos_p = pos.data_ptr<int64_t>();
  int32_t* seg_p = packing ? seg.data_ptr<int32_t>() : nullptr;
  int64_t targets = 0;
  std::vector<int32_t> cu_seqlens{0};  // packing: piece boundaries in the flattened [B * T] tokens
  int64_t max_seqlen = 0;
  auto add_piece = [&](int64_t len) {
    if (len == 0) return;
    cu_seqlens.push_back(cu_seqlens.back() + static_cast<int32_t>(len));
    max_seqlen = std::max(max_seqlen, len);
  };
  size_t s = 0;  // sample counter over the batch
  for (int64_t b = 0; b < B; ++b) {
    int64_t t0 = 0;
    int32_t seg_id = 0;
    for (size_t k = 0; k < rows[static_cast<size_t>(b)].size(); ++k, ++s, ++seg_id) {
      const auto& tok = tokens[s];
      const auto& ls = loss[s];
      const auto len = static_cast<int64_t>(tok.size());
      add_piece(len);
      for (int64_t t = 0; t < len; ++t) {
        const int64_t at = b * T + t0 + t;
        in_p[at] = tok[static_cast<size_t>(t)];
        pos_p[at] = t;
        if (seg_p) seg_p[at] = seg_id;
        if (t + 1 < len && ls[static_cast<size_t>(t + 1)]) {  // the next token of the same sample is a target
          lab_p[at] = tok[static_cast<size_t>(t + 1)];
          ++targets;
        }
      }
      t0 += len;
    }
    for (int64_t t = t0; t < T; ++t) {  // padding tail
      pos_p[b * T + t] = packing ? t - t0 : t;
      if (seg_p) seg_p[b * T + t] = seg_id;
    }
    add_piece(T - t0);
  }
  Batch batch;
  batch.input_ids = pin_memory ? input.pin_memory() : input;
  batch.labels = pin_memory ? labels.pin_memory() : labels;
  batch.position_ids = pin_memory ? pos.pin_memory() : pos;
  if (packing) {
    batch.segment_ids = pin_memory ? seg.pin_memory() : seg;
    at::Tensor cu = at::tensor(cu_seqlens, at::TensorOptions().dtype(at::kInt));
    batch.cu_seqlens = pin_memory ? cu.pin_memory() : cu;
    batch.max_seqlen = max_seqlen;
  }
  batch.num_target_tokens = targets;
  batch.num_samples = n_samples;
  return batch;
}

Batch TokenizedDataset::collate(const RowPlan& rows, const CollateOptions& options) const {
  return data::collate(*this, rows, options);
}

DataLoader::DataLoader(std::shared_ptr<const BatchSource> dataset, const LoaderOptions& o)
    : dataset_(std::move(dataset)),
      micro_batch_size_(o.micro_batch_size),
      collate_(o.collate()),
      seed_(o.seed),
      rank_(o.rank),
      world_(o.world_size),
      prefetch_(std::max<int64_t>(o.prefetch, 1)),
      shuffle_(o.shuffle) {
  FT_CHECK(dataset_ != nullptr, "DataLoader needs a dataset");
  if (micro_batch_size_ < 1) throw ConfigError("train.micro_batch_size must be at least 1");
  if (o.seq_len < dataset_->seq_len()) {
    throw ConfigError(
        fmt::format("loader seq_len {} is shorter than the dataset's {}", o.seq_len, dataset_->seq_len()));
  }
  int64_t items = dataset_->size();
  if (collate_.packing) {
    // Packed once, in a seed-fixed order; epochs shuffle the rows.
    std::vector<int64_t> order(static_cast<size_t>(items));
    std::iota(order.begin(), order.end(), 0);
    if (shuffle_) order = epoch_permutation(items, seed_, -1);
    packed_ = pack_rows(*dataset_, order, collate_.seq_len);
    items = static_cast<int64_t>(packed_.size());
  }
  sampler_ = std::make_unique<DistributedSampler>(items, seed_, rank_, world_, shuffle_);
  batches_per_epoch_ = (sampler_->per_rank() + micro_batch_size_ - 1) / micro_batch_size_;
  start_worker();
}

int64_t DataLoader::rows_per_rank() const {
  return sampler_->per_rank();
}

DataLoader::DataLoader(std::shared_ptr<const BatchSource> dataset, int64_t micro_batch_size, int64_t seq_len,
                       bool packing, int64_t pad_id, uint64_t seed, int64_t rank, int64_t world, int64_t prefetch,
                       at::Device device, bool shuffle)
    : DataLoader(std::move(dataset), [&] {
        LoaderOptions o;
        o.micro_batch_size = micro_batch_size;
        o.seq_len = seq_len;
        o.packing = packing;
        o.pad_id = pad_id;
        o.seed = seed;
        o.rank = rank;
        o.world_size = world;
        o.prefetch = prefetch;
        o.shuffle = shuffle;
        o.pin_memory = device.is_cuda();
        return o;
      }()) {}

DataLoader::~DataLoader() {
  stop_worker();
}

std::vector<int64_t> DataLoader::epoch_rows(int64_t epoch) const {
  return sampler_->indices(epoch);
}

RowPlan DataLoader::batch_rows(const std::vector<int64_t>& rows, int64_t b) const {
  RowPlan plan;
  const auto begin = static_cast<size_t>(b * micro_batch_size_);
  const size_t end = std::min(rows.size(), begin + static_cast<size_t>(micro_batch_size_));
  for (size_t r = begin; r < end; ++r) {
    if (collate_.packing)
      plan.push_back(packed_[static_cast<size_t>(rows[r])]);
    else
      plan.push_back({rows[r]});
  }
  return plan;
}

void DataLoader::worker(int64_t epoch, int64_t batch) {
  try {
    std::vector<int64_t> rows = epoch_rows(epoch);
    for (;;) {
      Item item;
      if (batch >= batches_per_epoch_) {
        ++epoch;
        batch = 0;
        rows = epoch_rows(epoch);
      } else {
        item.batch = dataset_->collate(batch_rows(rows, batch), collate_);
        ++batch;
      }
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stop_ || static_cast<int64_t>(queue_.size()) < prefetch_; });
      if (stop_) return;
      queue_.push_back(std::move(item));
      cv_.notify_all();
    }
  } catch (...) {
    std::unique_lock<std::mutex> lock(mutex_);
    queue_.push_back(Item{std::nullopt, std::current_exception()});
    cv_.notify_all();
  }
}

void DataLoader::start_worker() {
  stop_ = false;
  queue_.clear();
  thread_ = std::thread(&DataLoader::worker, this, epoch_, batch_);
}

void DataLoader::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  queue_.clear();
}

std::optional<Batch> DataLoader::next() {
  if (failed_) std::rethrow_exception(failed_);  // the worker stopped at its error; it stays the answer
  Item item;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return !queue_.empty(); });
    item = std::move(queue_.front());
    queue_.pop_front();
  }
  cv_.notify_all();
  if (item.error) {
    failed_ = item.error;
    std::rethrow_exception(item.error);
  }
  if (!item.batch) {
    ++epoch_;
    batch_ = 0;
    return std::nullopt;
  }
  ++batch_;
  return std::move(*item.batch);
}

void to_json(nlohmann::json& j, const DataLoader::State& s) {
  j = {{"epoch", s.epoch},    {"batch", s.batch},     {"seed", s.seed},
       {"world", s.world},    {"packing", s.packing}, {"micro_batch_size", s.micro_batch_size},
       {"samples", s.samples}};
}

void from_json(const nlohmann::json& j, DataLoader::State& s) {
  s.epoch = json_integer_at<int64_t>(j, "epoch");
  s.batch = json_integer_at<int64_t>(j, "batch");
  s.seed = json_integer_at<uint64_t>(j, "seed");
  s.world = json_integer_at<int64_t>(j, "world");
  j.at("packing").get_to(s.packing);
  s.micro_batch_size = json_integer_at<int64_t>(j, "micro_batch_size");
  s.samples = json_integer_at<int64_t>(j, "samples");
}

nlohmann::json DataLoader::state_dict() const {
  return State{epoch_, batch_, seed_, world_, collate_.packing, micro_batch_size_, dataset_->size()};
}

void DataLoader::load_state_dict(const nlohmann::json& s) {
  State saved;
  try {
    saved = s.get<State>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("invalid data loader state: ") + e.what(), "the checkpoint's data state is damaged");
  }
  const nlohmann::json was = saved, now = state_dict();
  // The state's fields, by the setting that decides each: what the saved position means in the data order.
  const std::pair<const char*, const char*> settings[] = {{"seed", "run.seed"},
                                                          {"world", "the world size (ranks)"},
                                                          {"packing", "data.packing"},
                                                          {"micro_batch_size", "train.micro_batch_size"},
                                                          {"samples", "the number of training samples"}};
  for (const auto& [key, setting] : settings) {
    if (was.at(key) != now.at(key)) {
      throw ConfigError(fmt::format("cannot resume the data order: {} was {} and is now {}", setting,
                                    was.at(key).dump(), now.at(key).dump()),
                        "resume with the same run.seed, world size, data.packing, train.micro_batch_size and data, "
                        "or start a new run (another run.output_dir, or --overwrite)");
    }
  }
  stop_worker();
  failed_ = nullptr;
  epoch_ = saved.epoch;
  batch_ = saved.batch;
  FT_CHECK(epoch_ >= 0 && batch_ >= 0 && batch_ <= batches_per_epoch_, "data loader state out of range");
  start_worker();
}

}  // namespace ft::data
