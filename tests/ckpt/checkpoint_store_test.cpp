// Atomic checkpoint directories: commit, pruning, corrupt-skipping, kills and full disks mid-write.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "ckpt/checkpoint_store.h"
#include "ckpt/rng_state.h"
#include "support/scratch_dir.h"
#include "support/test_support.h"
#include "util/checksum.h"
#include "util/error.h"
#include "util/file_writer.h"

namespace ft::test {
namespace {

namespace fs = std::filesystem;
using ckpt::CheckpointStore;

fs::path save(CheckpointStore& store, int64_t step, std::optional<double> metric = std::nullopt,
              size_t model_bytes = 1000) {
  const fs::path tmp = store.begin(step);
  ft::write_file(tmp / "model.safetensors", std::string(model_bytes, static_cast<char>('a' + step % 26)),
                 /*sync=*/true);
  fs::create_directories(tmp / "optimizer");
  ft::write_file(tmp / "optimizer" / "state.json", "{\"step\": " + std::to_string(step) + "}", /*sync=*/true);
  return store.commit(metric, {{"note", "test"}});
}

std::vector<int64_t> steps(const fs::path& run_dir) {
  std::vector<int64_t> out;
  for (const auto& c : CheckpointStore::list(run_dir)) out.push_back(c.step);
  return out;
}

bool has_hidden_leftovers(const fs::path& run_dir) {
  for (const auto& e : fs::directory_iterator(run_dir / "checkpoints"))
    if (e.path().filename().string()[0] == '.') return true;
  return false;
}

TEST(CheckpointStore, CommitWritesManifestWithChecksumsAndRenames) {
  ScratchDir run;
  CheckpointStore store(run.path(), {2, false});
  const fs::path dir = save(store, 123, 0.5);
  EXPECT_EQ(dir, run.path() / "checkpoints" / "step-000123");
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_FALSE(has_hidden_leftovers(run.path()));
  const auto manifest = nlohmann::json::parse(read_file(dir / "manifest.json"));
  EXPECT_EQ(manifest["step"], 123);
  EXPECT_EQ(manifest["metric"], 0.5);
  EXPECT_EQ(manifest["extra"]["note"], "test");
  EXPECT_EQ(manifest["files"]["model.safetensors"]["size"], 1000);
  Sha256 sha;
  sha.update(std::string(1000, 'a' + 123 % 26));
  EXPECT_EQ(manifest["files"]["model.safetensors"]["sha256"], sha.hex_digest());
  EXPECT_TRUE(manifest["files"].contains("optimizer/state.json"));
  EXPECT_TRUE(CheckpointStore::verify(dir).ok);
  EXPECT_THROW(store.commit(), Error);  // nothing pending
}

TEST(CheckpointStore, KeepLastDeletesOlderOnlyAfterCommit) {
  ScratchDir run;
  CheckpointStore store(run.path(), {2, false});
  for (int64_t s = 1; s <= 4; ++s) save(store, s * 10);
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{30, 40}));
  // An aborted save deletes nothing.
  store.begin(50);
  store.abort();
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{30, 40}));
  EXPECT_FALSE(has_hidden_leftovers(run.path()));
}

// A run resumed from an earlier checkpoint than the newest (the newest failed verification) keeps its own last
// keep_last: the abandoned newer ones do not push the valid older ones out.
TEST(CheckpointStore, KeepLastCountsNoStepPastTheOneSaved) {
  ScratchDir run;
  CheckpointStore store(run.path(), {2, false});
  for (int64_t step : {10, 20, 30}) save(store, step);
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{20, 30}));
  save(store, 25);  // resumed from 20
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{20, 25, 30}));
  save(store, 28);
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{25, 28, 30}));
}

TEST(CheckpointStore, KeepBestKeepsLowestMetric) {
  ScratchDir run;
  CheckpointStore store(run.path(), {1, true});
  save(store, 1, 0.5);
  save(store, 2, 0.3);
  save(store, 3, 0.9);
  save(store, 4, 0.8);
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{2, 4}));
}

TEST(CheckpointStore, SameStepIsReplaced) {
  ScratchDir run;
  CheckpointStore store(run.path(), {0, false});
  save(store, 7, std::nullopt, 10);
  save(store, 7, std::nullopt, 20);
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{7}));
  EXPECT_EQ(fs::file_size(run.path() / "checkpoints" / "step-000007" / "model.safetensors"), 20u);
  EXPECT_FALSE(has_hidden_leftovers(run.path()));  // the old one, swapped out, is removed
}

// Where the file system cannot swap two directories, a re-saved step is renamed aside before the new one moves in:
// a crash between the two renames leaves it as .old-step-N-<pid>, which the next start puts back.
TEST(CheckpointStore, AReplacementInterruptedBetweenItsRenamesIsRestored) {
  ScratchDir run;
  CheckpointStore store(run.path(), {0, false});
  save(store, 7);
  const fs::path dir = run.path() / "checkpoints";
  fs::rename(dir / "step-000007", dir / ".old-step-000007-12345");
  fs::create_directories(dir / ".tmp-step-000007-12345");  // the new one, unfinished
  const auto latest = CheckpointStore::find_latest_valid(run.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 7);
  EXPECT_TRUE(CheckpointStore::verify(dir / "step-000007").ok);
  save(store, 8);
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{7, 8}));
  EXPECT_FALSE(has_hidden_leftovers(run.path()));
}

TEST(CheckpointStore, LatestValidSkipsCorruptOnes) {
  ScratchDir run;
  CheckpointStore store(run.path(), {0, false});
  for (int64_t s = 1; s <= 4; ++s) save(store, s);
  const fs::path ckpt = run.path() / "checkpoints";
  {  // step 4: same size, one byte flipped
    std::fstream f(ckpt / "step-000004" / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('Z');
  }
  fs::resize_file(ckpt / "step-000003" / "optimizer" / "state.json", 3);  // truncated
  fs::remove(ckpt / "step-000002" / "manifest.json");                     // never committed
  EXPECT_EQ(CheckpointStore::verify(ckpt / "step-000004").problem, "model.safetensors: checksum mismatch");
  EXPECT_NE(CheckpointStore::verify(ckpt / "step-000003").problem.find("size 3"), std::string::npos);
  EXPECT_EQ(CheckpointStore::verify(ckpt / "step-000002").problem, "missing manifest.json");
  const auto latest = CheckpointStore::find_latest_valid(run.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 1);
  ScratchDir empty;
  EXPECT_FALSE(CheckpointStore::find_latest_valid(empty.path()).has_value());
}

// A child that dies half-way through writing leaves the earlier checkpoint intact and loadable.
TEST(CheckpointStore, ExitMidWriteLeavesPreviousIntact) {
  ScratchDir run;
  {
    CheckpointStore store(run.path(), {2, false});
    save(store, 1);
  }
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    CheckpointStore store(run.path(), {2, false});
    const fs::path tmp = store.begin(2);
    ft::write_file(tmp / "model.safetensors", std::string(1 << 20, 'x'), /*sync=*/true);
    ::_exit(0);  // no commit, no destructors
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_TRUE(has_hidden_leftovers(run.path()));  // the dead child's temporary directory
  const auto latest = CheckpointStore::find_latest_valid(run.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 1);
  CheckpointStore store(run.path(), {2, false});
  save(store, 3);  // begin() cleans the leftovers
  EXPECT_FALSE(has_hidden_leftovers(run.path()));
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{1, 3}));
}

// kill -9 at arbitrary moments of a save loop: every committed directory verifies, the newest valid exists.
TEST(CheckpointStore, SigkillDuringSaveLoopNeverLeavesCorruptCommit) {
  for (int round = 0; round < 3; ++round) {
    ScratchDir run;
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      CheckpointStore store(run.path(), {2, false});
      for (int64_t s = 1;; ++s) save(store, s, std::nullopt, 256 * 1024);
    }
    // Wait for the first commit, then kill at a different moment each round.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!fs::exists(run.path() / "checkpoints" / "step-000001" / "manifest.json") &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(40 + 45 * round));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    const auto all = CheckpointStore::list(run.path());
    ASSERT_FALSE(all.empty()) << "the child committed nothing in time";
    for (const auto& c : all) EXPECT_TRUE(CheckpointStore::verify(c.path).ok) << c.path;
    const auto latest = CheckpointStore::find_latest_valid(run.path());
    ASSERT_TRUE(latest.has_value());
    EXPECT_EQ(latest->step, all.back().step);
  }
}

// RLIMIT_FSIZE with SIGXFSZ ignored makes write() fail with EFBIG, as a full disk fails with ENOSPC.
TEST(CheckpointStore, FileSizeLimitIsAnErrorAndPreviousIntact) {
  ScratchDir run;
  {
    CheckpointStore store(run.path(), {2, false});
    save(store, 1);
  }
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{64 * 1024, 64 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    CheckpointStore store(run.path(), {2, false});
    try {
      save(store, 2, std::nullopt, 1 << 20);
    } catch (const Error& e) {
      const std::string msg = e.what();
      std::fprintf(stderr, "child: %s (%s)\n", e.what(), e.hint().c_str());
      store.abort();  // what the training loop's unwinding does (the destructor too)
      const bool tmp_gone = !has_hidden_leftovers(run.path());
      ::_exit(msg.find("File too large") != std::string::npos && !e.hint().empty() && tmp_gone ? 42 : 1);
    }
    ::_exit(2);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 42);
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{1}));
  EXPECT_TRUE(CheckpointStore::verify(run.path() / "checkpoints" / "step-000001").ok);
}

TEST(CheckpointStore, CommitFailureRemovesTemporaryDirectory) {
  ScratchDir run;
  CheckpointStore store(run.path(), {2, false});
  save(store, 1);
  const fs::path tmp = store.begin(2);
  fs::create_symlink("/etc/hostname", tmp / "link");  // not a regular file: commit refuses
  EXPECT_THROW(store.commit(), Error);
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(steps(run.path()), (std::vector<int64_t>{1}));
}

// A checkpoint made elsewhere: its manifest lists a file outside the checkpoint directory with the right size and
// checksum. verify() must refuse it without reading it, and find_latest_valid() must skip it.
void list_in_manifest(const fs::path& ckpt, const std::string& rel, const fs::path& file) {
  auto manifest = nlohmann::json::parse(read_file(ckpt / "manifest.json"));
  const auto digest = sha256_files({file}).at(0);
  manifest["files"][rel] = {{"size", digest.size}, {"sha256", digest.sha256}};
  ft::write_file(ckpt / "manifest.json", manifest.dump(2));
}

TEST(CheckpointStore, ManifestNamingAFileAboveTheCheckpointIsRejected) {
  ScratchDir run;
  CheckpointStore store(run.path(), {0, false});
  save(store, 1);
  const fs::path ckpt = save(store, 2);
  ft::write_file(run.path() / "secret.txt", "not part of any checkpoint");
  list_in_manifest(ckpt, "../../secret.txt", run.path() / "secret.txt");
  EXPECT_EQ(CheckpointStore::verify(ckpt).problem,
            (ckpt / "manifest.json").string() +
                ": file entry names '../../secret.txt': a '..' component would leave the directory");
  const auto latest = CheckpointStore::find_latest_valid(run.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 1);
}

TEST(CheckpointStore, ManifestNamingAnAbsolutePathIsRejected) {
  ScratchDir run;
  CheckpointStore store(run.path(), {0, false});
  const fs::path ckpt = save(store, 1);
  ft::write_file(run.path() / "secret.txt", "not part of any checkpoint");
  const std::string abs = (run.path() / "secret.txt").string();
  list_in_manifest(ckpt, abs, run.path() / "secret.txt");
  EXPECT_EQ(CheckpointStore::verify(ckpt).problem,
            (ckpt / "manifest.json").string() + ": file entry names '" + abs + "': an absolute path is not allowed");
}

TEST(CheckpointStore, ListedFileThatIsASymlinkLeavingTheCheckpointIsRejected) {
  ScratchDir run;
  CheckpointStore store(run.path(), {0, false});
  const fs::path ckpt = save(store, 1);
  // Same bytes outside, so size and checksum still match the manifest.
  fs::copy_file(ckpt / "model.safetensors", run.path() / "copy.safetensors");
  fs::remove(ckpt / "model.safetensors");
  fs::create_symlink(run.path() / "copy.safetensors", ckpt / "model.safetensors");
  const std::string real_run = fs::canonical(run.path()).string();
  EXPECT_EQ(CheckpointStore::verify(ckpt).problem,
            (ckpt / "manifest.json").string() + ": file entry names 'model.safetensors': it resolves to " + real_run +
                "/copy.safetensors, outside " + real_run + "/checkpoints/step-000001 (a symlink leaving the directory)");
}

TEST(CheckpointStore, UnlistedSymlinkLeavingTheCheckpointIsRejected) {
  ScratchDir run;
  CheckpointStore store(run.path(), {0, false});
  const fs::path ckpt = save(store, 1);
  // Files read by fixed name (rng.safetensors, ...) need not be in the manifest: a link there must not pass.
  fs::create_symlink("/etc/hostname", ckpt / "optimizer" / "rng.safetensors");
  EXPECT_EQ(CheckpointStore::verify(ckpt).problem,
            "optimizer/rng.safetensors: a symlink that resolves outside the checkpoint directory");
  fs::remove(ckpt / "optimizer" / "rng.safetensors");
  fs::create_symlink("state.json", ckpt / "optimizer" / "rng.safetensors");  // inside: fine
  EXPECT_TRUE(CheckpointStore::verify(ckpt).ok) << CheckpointStore::verify(ckpt).problem;
}

TEST(RngState, CaptureRestoreReplaysTheSameDraws) {
  const auto saved = ckpt::capture_rng_states();
  ASSERT_TRUE(saved.count("cpu"));
  EXPECT_EQ(saved.at("cpu").scalar_type(), at::kByte);
  const at::Tensor first = at::randn({16});
  ckpt::restore_rng_states(saved);
  EXPECT_TRUE(at::equal(at::randn({16}), first));
  EXPECT_THROW(ckpt::restore_rng_states({}), Error);
  // Found when writing tests/fuzz/fuzz_checkpoint: a generator named "cuda:x" escaped std::stoi's invalid_argument.
  for (const char* name : {"cuda:x", "cuda:", "cuda:99999999999", "gpu:0"}) {
    auto states = saved;
    states[name] = saved.at("cpu");
    EXPECT_THROW(ckpt::restore_rng_states(states), Error) << name;
  }
}

}  // namespace
}  // namespace ft::test
