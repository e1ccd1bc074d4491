#include "train/reference_logps_file.h"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "config/loader.h"
#include "data/preference_dataset.h"
#include "dist/comm.h"
#include "io/safetensors.h"
#include "util/error.h"
#include "util/fmt.h"
#include "util/hash.h"

namespace ft::train {
namespace {

constexpr int kFormatVersion = 1;  // bump when the pass or the key changes what the values are

std::filesystem::path file_of(const std::filesystem::path& dir, const std::string& key) {
  return dir / (key + ".safetensors");
}

// model.path's files by name, size and modification time (hashing 16 GB of weights would cost more than the pass).
std::string model_files(const std::string& model_path) {
  std::string out;
  std::error_code ec;
  if (model_path.empty() || !std::filesystem::is_directory(model_path, ec)) return out;
  std::vector<std::filesystem::directory_entry> entries(std::filesystem::directory_iterator(model_path, ec), {});
  std::sort(entries.begin(), entries.end());
  for (const auto& e : entries) {
    if (!e.is_regular_file(ec)) continue;
    const auto mtime = e.last_write_time(ec).time_since_epoch().count();
    out += fmt::format("{} {} {}\n", e.path().filename().string(), e.file_size(ec), mtime);
  }
  return out;
}

}  // namespace

std::string reference_logps_context(const Config& cfg, c10::Device device) {
  Config c;  // only the settings the pass depends on, at their values; the rest at defaults
  c.model = cfg.model;
  c.tokenizer = cfg.tokenizer;
  c.run.seed = cfg.run.seed;
  c.train.precision = cfg.train.precision;
  c.train.fused_kernels = cfg.train.fused_kernels;
  c.train.micro_batch_size = cfg.train.micro_batch_size;
  c.data.seq_len = cfg.data.seq_len;
  c.data.packing = cfg.data.packing;
  c.data.pad_to_multiple_of = cfg.data.pad_to_multiple_of;
  c.preference.truncation = cfg.preference.truncation;
  return fmt::format("format {}\ndevice {}\n{}\n{}", kFormatVersion, device.str(), config::to_yaml(c),
                     model_files(cfg.model.path));
}

std::string reference_logps_key(const data::PreferenceDataset& pairs, const std::string& context) {
  uint64_t h = hash_string(context);
  for (int64_t i = 0; i < pairs.distinct_pairs(); ++i) {
    const auto& pair = pairs.distinct_pair(i);
    for (const auto* seq : {&pair.chosen, &pair.rejected}) {
      const int64_t n = static_cast<int64_t>(seq->tokens.size());
      h = hash_bytes(&n, sizeof n, h);
      h = hash_bytes(seq->tokens.data(), seq->tokens.size() * sizeof(seq->tokens[0]), h);
      h = hash_bytes(seq->loss.data(), seq->loss.size() * sizeof(seq->loss[0]), h);
    }
  }
  return hex64(h);
}

std::optional<at::Tensor> read_reference_logps(const std::filesystem::path& dir, const std::string& key, int64_t pairs,
                                               dist::Communicator* comm, int rank) {
  at::Tensor table;
  if (rank == 0) {
    const auto path = file_of(dir, key);
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) {
      try {
        auto tensors = io::read_safetensors(path);
        const auto it = tensors.find("logps");
        if (it != tensors.end() && it->second.dim() == 2 && it->second.size(0) == pairs && it->second.size(1) == 2 &&
            it->second.scalar_type() == at::kFloat) {
          table = it->second.clone();
        } else {
          FT_LOG_WARN("{} holds no F32 [{}, 2] \"logps\": the reference log-probs are computed again", path.string(),
                      pairs);
        }
      } catch (const std::exception& e) {
        FT_LOG_WARN("{} is unreadable ({}): the reference log-probs are computed again", path.string(), e.what());
      }
    }
  }
  if (comm != nullptr && comm->world_size() > 1) {
    const bool found = broadcast_json(*comm, nlohmann::json(table.defined())).get<bool>();
    if (!found) return std::nullopt;
    std::vector<at::Tensor> parts{
        rank == 0 ? table.to(comm->device())
                  : at::empty({pairs, 2}, at::TensorOptions().dtype(at::kFloat).device(comm->device()))};
    comm->broadcast_(parts, 0);
    return parts[0].cpu();
  }
  if (!table.defined()) return std::nullopt;
  return table;
}

void write_reference_logps(const std::filesystem::path& dir, const std::string& key, const at::Tensor& table,
                           int rank) {
  if (rank != 0) return;
  const auto path = file_of(dir, key);
  // Runs beside each other (a sweep's trials) may write the same key: each through its own temporary file.
  const auto temporary = dir / (key + ".safetensors.tmp." + std::to_string(::getpid()));
  try {
    std::filesystem::create_directories(dir);
    io::write_safetensors(temporary, {{"logps", table.to(at::kCPU, at::kFloat).contiguous()}});
    std::filesystem::rename(temporary, path);
  } catch (const std::exception& e) {
    std::error_code ec;
    std::filesystem::remove(temporary, ec);
    FT_LOG_WARN("could not keep the reference log-probs in {} ({}); a resumed run computes them again", path.string(),
                e.what());
  }
}

}  // namespace ft::train
