// CheckpointManager: the Stateful parts of a checkpoint and the random generators round-trip, and trainer_state.json
// of checkpoints written before the "progress" part (format 1) or an optional part existed is read.
#include <gtest/gtest.h>

#include <memory>

#include "ckpt/checkpoint_manager.h"
#include "dist/comm.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ft::test {
namespace {

struct Counter : ckpt::Stateful {
  int64_t value = 0;
  nlohmann::json state_dict() const override { return {{"value", value}}; }
  void load_state_dict(const nlohmann::json& s) override { value = s.at("value").get<int64_t>(); }
};

TEST(CheckpointManager, SharedAndPerRankPartsAndTheGeneratorsComeBackOnRestore) {
  TempDir dir;
  Counter shared, mine;
  ckpt::CheckpointManager manager(std::make_shared<dist::SingleProcessCommunicator>(), 0);
  manager.add_shared("progress", shared);
  manager.add_per_rank("loader", mine);
  shared.value = 7;
  mine.value = 3;
  at::manual_seed(11);
  at::rand({4});
  const auto snapshot = manager.snapshot({{"fingerprint", "f"}});
  ckpt::CheckpointManager::write(snapshot, dir.path());
  const at::Tensor expected = at::rand({8});  // what follows the saved generator state

  shared.value = 0;
  mine.value = 0;
  at::manual_seed(99);
  const auto doc = ckpt::CheckpointManager::read_trainer_state(dir.path());
  EXPECT_EQ(doc.at("format"), ckpt::kTrainerStateFormat);
  EXPECT_EQ(doc.at("fingerprint"), "f");
  EXPECT_EQ(doc.at("ranks").at(0).at("loader").at("value"), 3);
  manager.restore(doc, dir.path());
  EXPECT_EQ(shared.value, 7);
  EXPECT_EQ(mine.value, 3);
  EXPECT_TRUE(at::equal(at::rand({8}), expected));
}

TEST(CheckpointManager, Format1TrainerStateIsUpgradedToTheProgressPart) {
  TempDir dir;
  write_file(dir / "trainer_state.json",
             R"({"step": 40, "epoch": 2, "tokens_seen": 5120, "nan_skips": 1, "best_eval_loss": 0.5,
                 "world_size": 1, "scaler": {"enabled": false}, "ranks": [{"loader": {"epoch": 2}}],
                 "fingerprint": "x"})");
  const auto doc = ckpt::CheckpointManager::read_trainer_state(dir.path());
  EXPECT_EQ(doc.at("progress"),
            nlohmann::json({{"step", 40}, {"epoch", 2}, {"tokens_seen", 5120}, {"nan_skips", 1}, {"best_eval_loss", 0.5}}));
  EXPECT_FALSE(doc.contains("step"));
  EXPECT_EQ(doc.at("scaler"), nlohmann::json({{"enabled", false}}));
  EXPECT_EQ(doc.at("format"), ckpt::kTrainerStateFormat);
}

// A part added later (DDP's buckets) is optional: a checkpoint without it restores every other part and leaves it
// as it is; a required part that is missing is an error naming the file.
TEST(CheckpointManager, OptionalPartMissingFromAnOlderCheckpointIsLeftAsItIs) {
  TempDir dir;
  Counter progress, later;
  ckpt::CheckpointManager old_manager(std::make_shared<dist::SingleProcessCommunicator>(), 0);
  old_manager.add_shared("progress", progress);
  progress.value = 5;
  ckpt::CheckpointManager::write(old_manager.snapshot({}), dir.path());

  progress.value = 0;
  later.value = 9;
  ckpt::CheckpointManager manager(std::make_shared<dist::SingleProcessCommunicator>(), 0);
  manager.add_shared("progress", progress);
  manager.add_shared("ddp", later, /*optional=*/true);
  const auto doc = ckpt::CheckpointManager::read_trainer_state(dir.path());
  manager.restore(doc, dir.path());
  EXPECT_EQ(progress.value, 5);
  EXPECT_EQ(later.value, 9);

  ckpt::CheckpointManager strict(std::make_shared<dist::SingleProcessCommunicator>(), 0);
  strict.add_shared("ddp", later);
  try {
    strict.restore(doc, dir.path());
    ADD_FAILURE() << "a missing required part was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trainer_state.json"), std::string::npos) << e.what();
  }
}

TEST(CheckpointManager, NewerOrDamagedTrainerStateIsRefusedNamingTheFile) {
  TempDir dir;
  const auto file = (dir / "trainer_state.json").string();
  write_file(dir / "trainer_state.json", R"({"format": 99})");
  try {
    ckpt::CheckpointManager::read_trainer_state(dir.path());
    ADD_FAILURE() << "a format-99 state was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file + " has format 99"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("newer finetune"), std::string::npos) << e.hint();
  }
  write_file(dir / "trainer_state.json", "{\"step\": ");
  EXPECT_THROW(ckpt::CheckpointManager::read_trainer_state(dir.path()), Error);
}

}  // namespace
}  // namespace ft::test
