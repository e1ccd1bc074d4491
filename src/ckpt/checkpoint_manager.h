// The small parts of a training checkpoint, saved and restored as one: trainer_state.json holds the parts shared by
// the job (rank 0's copy), every rank's own parts under "ranks", and fields the trainer adds (fingerprint, world
// size, versions); rng.safetensors holds every rank's random generators. Weights and optimizer state, large and
// possibly sharded, are written by the trainer beside them.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/stateful.h"
#include "io/safetensors.h"

namespace ft::dist {
class Communicator;
}

namespace ft::ckpt {

// Written as "format" into trainer_state.json. Version 1 (no "format" key, written before 2026-12-02) kept the loop's
// progress as top-level keys; read_trainer_state() upgrades it.
constexpr int kTrainerStateFormat = 2;

// What one save gathers from every rank; complete on rank 0 only.
struct StateSnapshot {
  nlohmann::json document;  // trainer_state.json
  io::TensorMap rng;        // U8 [n] per "<generator>.rank<r>"
};

class CheckpointManager {
 public:
  CheckpointManager(std::shared_ptr<dist::Communicator> comm, int rank);

  // Registers a part under `name`: shared parts are saved from rank 0 and restored on every rank; per-rank parts
  // are saved and restored rank by rank (a data loader's shard position). The parts must outlive the manager.
  // `optional`: a part that checkpoints of earlier versions lack; restore() leaves it as it is where it is missing.
  void add_shared(const std::string& name, Stateful& part, bool optional = false);
  void add_per_rank(const std::string& name, Stateful& part);

  // Collective: every rank calls it. The state of every part and generator, with `extra` fields (fingerprint,
  // versions, ...) merged into the document.
  StateSnapshot snapshot(const nlohmann::json& extra) const;
  // Rank 0: writes trainer_state.json and rng.safetensors into the checkpoint directory being built.
  static void write(const StateSnapshot& snapshot, const std::filesystem::path& dir);

  // trainer_state.json of a checkpoint, upgraded to the current format. Throws ft::Error naming the file.
  static nlohmann::json read_trainer_state(const std::filesystem::path& dir);
  // Restores every registered part from `document` (read_trainer_state) and this rank's generators from `dir`.
  void restore(const nlohmann::json& document, const std::filesystem::path& dir) const;

 private:
  std::shared_ptr<dist::Communicator> comm_;
  int rank_;
  std::vector<std::pair<std::string, Stateful*>> shared_;
  std::set<std::string> optional_;  // of shared_
  std::vector<std::pair<std::string, Stateful*>> per_rank_;
};

}  // namespace ft::ckpt
