#include "ckpt/checkpoint_manager.h"

#include <cstring>

#include "ckpt/rng_state.h"
#include "dist/comm.h"
#include "util/error.h"
#include "util/file_writer.h"
#include "util/fs.h"

namespace ft::ckpt {
namespace {

constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kRngFile = "rng.safetensors";

// Version 1 kept the loop's progress at the top level; version 2 keeps it as the "progress" part.
void upgrade_from_v1(nlohmann::json& doc) {
  nlohmann::json progress;
  for (const char* key : {"step", "epoch", "tokens_seen", "nan_skips", "best_eval_loss"}) {
    if (doc.contains(key)) {
      progress[key] = doc[key];
      doc.erase(key);
    }
  }
  doc["progress"] = progress;
  doc["format"] = kTrainerStateFormat;
}

}  // namespace

CheckpointManager::CheckpointManager(std::shared_ptr<dist::Communicator> comm, int rank)
    : comm_(std::move(comm)), rank_(rank) {}

void CheckpointManager::add_shared(const std::string& name, Stateful& part, bool optional) {
  shared_.emplace_back(name, &part);
  if (optional) optional_.insert(name);
}

void CheckpointManager::add_per_rank(const std::string& name, Stateful& part) {
  per_rank_.emplace_back(name, &part);
}

StateSnapshot CheckpointManager::snapshot(const nlohmann::json& extra) const {
  StateSnapshot out;
  nlohmann::json mine = nlohmann::json::object();
  for (const auto& [name, part] : per_rank_) mine[name] = part->state_dict();
  const auto ranks = dist::all_gather_strings(*comm_, mine.dump());
  // Generators: the same names on every rank (the CPU one and one per visible device), gathered name by name.
  for (const auto& [name, state] : capture_rng_states()) {
    const std::string blob(reinterpret_cast<const char*>(state.data_ptr<uint8_t>()),
                           static_cast<size_t>(state.numel()));
    const auto blobs = dist::all_gather_strings(*comm_, blob);
    for (size_t r = 0; r < blobs.size(); ++r) {
      auto t = at::empty({static_cast<int64_t>(blobs[r].size())}, at::kByte);
      std::memcpy(t.data_ptr<uint8_t>(), blobs[r].data(), blobs[r].size());
      out.rng[name + ".rank" + std::to_string(r)] = t;
    }
  }
  if (rank_ != 0) return out;
  out.document = extra;
  out.document["format"] = kTrainerStateFormat;
  for (const auto& [name, part] : shared_) out.document[name] = part->state_dict();
  out.document["ranks"] = nlohmann::json::array();
  for (const auto& r : ranks) out.document["ranks"].push_back(nlohmann::json::parse(r));
  return out;
}

void CheckpointManager::write(const StateSnapshot& snapshot, const std::filesystem::path& dir) {
  io::write_safetensors(dir / kRngFile, snapshot.rng);
  write_file(dir / kStateFile, snapshot.document.dump(2));
}

nlohmann::json CheckpointManager::read_trainer_state(const std::filesystem::path& dir) {
  const auto path = dir / kStateFile;
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error("cannot parse " + path.string() + ": " + e.what(), "the checkpoint is damaged; resume from another");
  }
  if (!doc.is_object()) throw Error(path.string() + " is not a JSON object", "the checkpoint is damaged");
  if (!doc.contains("format")) upgrade_from_v1(doc);
  const auto format = doc.at("format");
  if (!format.is_number_integer() || format.get<int64_t>() > kTrainerStateFormat) {
    throw Error(path.string() + " has format " + format.dump() + "; this finetune reads up to " +
                    std::to_string(kTrainerStateFormat),
                "the checkpoint was written by a newer finetune: resume with that version");
  }
  return doc;
}

void CheckpointManager::restore(const nlohmann::json& document, const std::filesystem::path& dir) const {
  try {
    for (const auto& [name, part] : shared_) {
      if (optional_.count(name) > 0 && !document.contains(name)) continue;
      part->load_state_dict(document.at(name));
    }
    const auto& mine = document.at("ranks").at(static_cast<size_t>(rank_));
    for (const auto& [name, part] : per_rank_) part->load_state_dict(mine.at(name));
  } catch (const nlohmann::json::exception& e) {
    throw Error("invalid " + (dir / kStateFile).string() + ": " + e.what(),
                "the checkpoint is damaged; resume from another checkpoint or start a new run");
  }
  io::TensorMap mine;
  const std::string suffix = ".rank" + std::to_string(rank_);
  for (const auto& [name, t] : io::read_safetensors(dir / kRngFile)) {
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      mine[name.substr(0, name.size() - suffix.size())] = t;
    }
  }
  restore_rng_states(mine);
}

}  // namespace ft::ckpt
