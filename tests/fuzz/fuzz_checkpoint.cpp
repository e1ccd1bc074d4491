// What a training checkpoint holds besides weights: trainer_state.json (mode 0: the payload, restored into the
// loop's progress and the loss scaler), rng.safetensors (mode 1: the generators restored), and manifest.json
// (mode 2: sizes and SHA-256 of the checkpoint's files, verified and listed as resume does). The other files of the
// checkpoint are valid ones written by the real code in setup.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/checkpoint_store.h"
#include "dist/comm.h"
#include "fuzz_support.h"
#include "optim/grad_scaler.h"
#include "train/train_state.h"

namespace ft::fuzz {
namespace {

namespace fs = std::filesystem;

struct Parts {
  train::TrainState progress;
  optim::GradScaler scaler{optim::GradScalerOptions{}, at::Device(at::kCPU)};
  ckpt::CheckpointManager manager{std::make_shared<dist::SingleProcessCommunicator>(), 0};
  Parts() {
    manager.add_shared("progress", progress);
    manager.add_shared("scaler", scaler);
  }
};

Parts& parts() {
  static Parts p;
  return p;
}

const fs::path& state_dir() {
  static const fs::path dir = scratch() / "state";
  return dir;
}
const fs::path& run_dir() {
  static const fs::path dir = scratch() / "run";
  return dir;
}
fs::path committed;
std::string valid_state, valid_rng, valid_manifest;

}  // namespace

void target_setup() {
  at::set_num_threads(1);
  fs::create_directories(state_dir());
  parts().progress.step = 12;
  parts().progress.best_eval_loss = 1.5;
  at::manual_seed(3);
  ckpt::CheckpointManager::write(parts().manager.snapshot({{"fingerprint", "seed"}, {"world_size", 1}}), state_dir());
  valid_state = read_bytes(state_dir() / "trainer_state.json");
  valid_rng = read_bytes(state_dir() / "rng.safetensors");

  ckpt::CheckpointStore store(run_dir(), {});
  const fs::path pending = store.begin(12);
  write_bytes(pending / "model.safetensors", std::string(300, 'w'));
  fs::create_directories(pending / "optimizer");
  write_bytes(pending / "optimizer" / "state.json", "{}");
  committed = store.commit(0.5, {{"note", "seed"}});
  valid_manifest = read_bytes(committed / ckpt::CheckpointStore::kManifest);
}

std::vector<std::string> seeds() {
  return {with_mode(0, valid_state), with_mode(1, valid_rng), with_mode(2, valid_manifest),
          with_mode(0, R"({"step": 40, "epoch": 2, "tokens_seen": 5120, "nan_skips": 1, "best_eval_loss": 0.5,)"
                       R"( "world_size": 1, "scaler": {"enabled": false}, "ranks": [{"loader": {"epoch": 2}}]})")};
}

}  // namespace ft::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ft;
  using fuzz::state_dir;
  const auto input = fuzz::split_mode(data, size);
  switch (input.mode % 3) {
    case 0:
    case 1:
      fuzz::write_bytes(state_dir() / "trainer_state.json", input.mode % 3 == 0 ? input.payload : fuzz::valid_state);
      fuzz::write_bytes(state_dir() / "rng.safetensors", input.mode % 3 == 1 ? input.payload : fuzz::valid_rng);
      fuzz::accepted([&] {
        fuzz::parts().manager.restore(ckpt::CheckpointManager::read_trainer_state(state_dir()), state_dir());
      });
      break;
    default: {
      const auto manifest = fuzz::committed / ckpt::CheckpointStore::kManifest;
      fuzz::write_bytes(manifest, input.payload);
      fuzz::accepted([&] {
        ckpt::CheckpointStore::verify(fuzz::committed);
        ckpt::CheckpointStore::list(fuzz::run_dir());
        ckpt::CheckpointStore::find_latest_valid(fuzz::run_dir());
      });
      fuzz::write_bytes(manifest, fuzz::valid_manifest);
    }
  }
  return 0;
}
