#include "ckpt/checkpoint_writer.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <thread>

#include <nlohmann/json.hpp>

#include "dist/comm.h"
#include "util/error.h"
#include "util/file_writer.h"
#include "util/fmt.h"
#include "util/fs.h"
#include "util/stopwatch.h"

namespace ft::ckpt {

CheckpointWriterOptions CheckpointWriterOptions::from_config(const Config& cfg, c10::Device device, bool sharded) {
  CheckpointWriterOptions opts;
  opts.background =
      cfg.checkpoint.async == AsyncSave::kOn || (cfg.checkpoint.async == AsyncSave::kAuto && device.is_cuda());
  opts.every_rank_writes = sharded;
  opts.timeout_s = static_cast<double>(cfg.distributed.timeout_s);
  return opts;
}
namespace fs = std::filesystem;
namespace {

using Clock = SteadyClock;

fs::path marker(const fs::path& dir, const char* kind, int rank) {
  return dir / fmt::format(".{}-rank{}", kind, rank);
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

bool on_device(const NamedTensors& tensors) {
  for (const auto& [name, t] : tensors) {
    if (!t.device().is_cpu()) return true;
  }
  return false;
}

int64_t tensor_bytes(const NamedTensors& tensors) {
  const auto sizes = tensor_sizes(tensors);
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
}

// `e` with the temporary directory (gone once the save is aborted) replaced by the checkpoint it was to become, and
// the newest intact checkpoint named in the hint.
Error save_failure(const Error& e, const fs::path& tmp, int64_t step, const fs::path& run_dir) {
  std::string message = e.what();
  if (!tmp.empty()) {
    const std::string target = (tmp.parent_path() / fmt::format("step-{:06d}", step)).string();
    for (size_t at = message.find(tmp.string()); at != std::string::npos; at = message.find(tmp.string(), at)) {
      message.replace(at, tmp.string().size(), target);
      at += target.size();
    }
  }
  const auto previous = CheckpointStore::find_latest_valid(run_dir);
  return Error(fmt::format("checkpoint of step {} not saved: {}", step, message),
               e.hint() + (previous ? "; " + previous->path.string() + " is intact and resume: auto continues from it"
                                    : std::string()),
               e.code());
}

}  // namespace

CheckpointWriter::CheckpointWriter(std::unique_ptr<CheckpointStore> store, std::shared_ptr<dist::Communicator> comm,
                                   int rank, int world_size, CheckpointWriterOptions opts)
    : store_(std::move(store)),
      comm_(std::move(comm)),
      rank_(rank),
      world_size_(world_size),
      opts_(opts),
      writer_(std::make_unique<BackgroundWriter>()) {
  FT_CHECK(rank_ != 0 || store_ != nullptr, "CheckpointWriter: rank 0 needs the checkpoint store");
}

CheckpointWriter::~CheckpointWriter() = default;

void CheckpointWriter::wait() {
  const double waited = writer_->wait();
  if (waited > 0.1) FT_LOG_INFO("waited {:.1f} s for the previous checkpoint to reach the disk", waited);
}

void CheckpointWriter::rethrow_failure() {
  writer_->rethrow_if_failed();
}

void CheckpointWriter::save(SaveRequest request) {
  const auto start = Clock::now();
  wait();
  fs::path dir;
  if (rank_ == 0) dir = store_->begin(request.step);
  if (world_size_ > 1 && opts_.every_rank_writes) dir = dist::broadcast_string(*comm_, dir.string());
  if (opts_.background && stage(request)) {
    const int64_t step = request.step;
    writer_->submit([this, request = std::move(request), dir] {
      staging_.wait_copied();
      write_and_commit(request, dir);
    });
    FT_LOG_INFO("checkpoint of step {}: copied in {:.2f} s, written in the background", step, seconds_since(start));
    return;
  }
  write_and_commit(request, dir);
  comm_->barrier();
}

bool CheckpointWriter::host_has_room(int64_t bytes) {
  const int64_t more = bytes - staging_.capacity();
  if (more <= 0) return true;
  const auto available = host_memory_available();
  // Pinned memory cannot be swapped or reclaimed: the copies may take at most half of what is free, leaving the rest
  // to the data loader, the page cache and whatever else runs on the host.
  if (!available || static_cast<double>(more) <= 0.5 * static_cast<double>(*available)) return true;
  if (!memory_warned_) {
    FT_LOG_WARN("checkpoint.async: the host copy of a checkpoint needs {:.1f} GiB of memory, {:.1f} GiB are "
                "available; checkpoints are written synchronously (training waits for the disk)",
                static_cast<double>(bytes) / kGiB, static_cast<double>(*available) / kGiB);
    memory_warned_ = true;
  }
  return false;
}

void CheckpointWriter::prepare(const NamedTensors& tensors) {
  if (!opts_.background || !host_has_room(tensor_bytes(tensors))) return;
  writer_->submit([this, sizes = tensor_sizes(tensors), pinned = on_device(tensors)] {
    staging_.reserve(sizes, pinned);
  });
}

bool CheckpointWriter::stage(SaveRequest& request) {
  if (!host_has_room(tensor_bytes(request.tensors))) return false;
  staging_.reserve(tensor_sizes(request.tensors), on_device(request.tensors));
  for (auto& [name, t] : request.tensors) t = staging_.stage(t);
  staging_.record();
  return true;
}

void CheckpointWriter::write_and_commit(const SaveRequest& request, const fs::path& dir) {
  const auto start = Clock::now();
  if (rank_ != 0) {
    if (!opts_.every_rank_writes) return;
    try {
      nlohmann::json digests = nlohmann::json::object();
      for (const auto& [path, d] : request.write(dir, request.tensors)) {
        digests[path.lexically_relative(dir).generic_string()] = {{"size", d.size}, {"sha256", d.sha256}};
      }
      ft::write_file(marker(dir, "done", rank_), digests.dump());
    } catch (const Error& e) {
      ft::write_file(marker(dir, "failed", rank_), e.what());
      throw;
    }
    return;
  }
  try {
    FileDigests digests;
    for (const auto& [path, d] : request.write(dir, request.tensors)) digests.emplace(path.lexically_normal(), d);
    if (opts_.every_rank_writes) wait_for_ranks(dir, digests);
    const auto committed = store_->commit(request.metric, {}, digests);
    const double seconds = seconds_since(start);
    const double gb = static_cast<double>(tensor_bytes(request.tensors)) / 1e9;
    FT_LOG_INFO("checkpoint saved: {} ({:.2f} GB written in {:.1f} s, {:.2f} GB/s)", committed.string(), gb, seconds,
                gb / std::max(seconds, 1e-9));
  } catch (const Error& e) {
    store_->abort();
    throw save_failure(e, dir, request.step, store_->dir().parent_path());
  } catch (...) {
    store_->abort();
    throw;
  }
}

void CheckpointWriter::wait_for_ranks(const fs::path& dir, FileDigests& digests) const {
  const auto start = Clock::now();
  for (int r = 1; r < world_size_; ++r) {
    while (!fs::exists(marker(dir, "done", r))) {
      if (fs::exists(marker(dir, "failed", r))) {
        throw Error(fmt::format("rank {} could not write its part: {}", r, read_text_file(marker(dir, "failed", r))),
                    "every rank writes its optimizer shard into the run directory: it must be one shared filesystem "
                    "with free space");
      }
      if (seconds_since(start) > opts_.timeout_s) {
        throw Error(fmt::format("rank {} did not report its part within {:.0f} s", r, opts_.timeout_s),
                    "check that rank's log; distributed.timeout_s sets how long rank 0 waits");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // A marker that does not parse only costs the manifest a read of that rank's files.
    const auto written = nlohmann::json::parse(read_text_file(marker(dir, "done", r)), nullptr, false);
    if (written.is_object()) {
      for (const auto& [rel, d] : written.items()) {
        if (d.is_object() && d.contains("size") && d.at("size").is_number_unsigned() && d.contains("sha256") &&
            d.at("sha256").is_string()) {
          digests[(dir / rel).lexically_normal()] = {d.at("sha256").get<std::string>(), d.at("size").get<uint64_t>()};
        }
      }
    }
    fs::remove(marker(dir, "done", r));
  }
}

}  // namespace ft::ckpt
