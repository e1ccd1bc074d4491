// Checkpoints written in the background: host copies that do not follow later changes of the live tensors, one job
// at a time, failures that reach the training thread, and CheckpointWriter saves equal to synchronous ones.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "ckpt/async_save.h"
#include "ckpt/checkpoint_writer.h"
#include "dist/comm.h"
#include "io/safetensors.h"
#include "support/scratch_dir.h"
#include "util/error.h"
#include "util/file_writer.h"

namespace ft::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

TEST(HostStaging, CopiesDoNotFollowLaterChangesAndTheBlocksAreReused) {
  ckpt::HostStaging staging;
  at::Tensor live = at::arange(12, at::kFloat).reshape({3, 4});
  const at::Tensor step = at::full({}, 7.0, at::kFloat);
  const at::Tensor big = at::ones({5 << 20}, at::kFloat);  // 20 MB: a block of its own
  const ckpt::NamedTensors tensors{{"big", big}, {"step", step}, {"w", live}};
  EXPECT_EQ(ckpt::tensor_sizes(tensors), (std::vector<int64_t>{20 << 20, 4, 48}));
  staging.reserve(ckpt::tensor_sizes(tensors), /*pinned=*/false);
  EXPECT_EQ(staging.capacity(), (20 << 20) + (64 << 20));  // its own block, and one shared by the small two
  const at::Tensor big_copy = staging.stage(big);
  const at::Tensor step_copy = staging.stage(step);
  const at::Tensor copy = staging.stage(live);
  staging.record();
  staging.wait_copied();
  live.add_(100);  // the next optimizer step
  EXPECT_TRUE(at::equal(copy, at::arange(12, at::kFloat).reshape({3, 4})));
  EXPECT_EQ(step_copy.dim(), 0);
  EXPECT_EQ(step_copy.item<float>(), 7.0f);
  EXPECT_TRUE(at::equal(big_copy, big));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(copy.data_ptr()) % 64, 0u);
  EXPECT_THROW(staging.stage(live), Error) << "more tensors than planned";

  // The same plan keeps the blocks; another one replaces them.
  staging.reserve(ckpt::tensor_sizes(tensors), false);
  EXPECT_EQ(staging.stage(big).data_ptr(), big_copy.data_ptr());
  EXPECT_THROW(staging.stage(big), Error) << "a tensor other than planned";
  staging.reserve({4}, false);
  EXPECT_EQ(staging.capacity(), 64 << 20);
}

// A checkpoint's tensors come in name order, so large and small ones alternate: a small tensor after a large one
// goes into the shared block that is still open, not into the large one's block.
TEST(HostStaging, SmallTensorsBetweenLargeOnesShareOneBlock) {
  ckpt::HostStaging staging;
  std::vector<at::Tensor> tensors;
  for (int i = 0; i < 6; ++i) {
    const int64_t numel = i % 2 == 0 ? int64_t{3} << 20 : int64_t{4} << 20;  // 12 MB shared, 16 MB own
    tensors.push_back(at::full({numel}, static_cast<float>(i), at::kFloat));
  }
  std::vector<int64_t> sizes;
  for (const auto& t : tensors) sizes.push_back(t.numel() * t.element_size());
  staging.reserve(sizes, /*pinned=*/false);
  EXPECT_EQ(staging.capacity(), 3 * (int64_t{16} << 20) + (int64_t{64} << 20));
  std::vector<at::Tensor> copies;
  for (const auto& t : tensors) copies.push_back(staging.stage(t));
  staging.record();
  staging.wait_copied();
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_TRUE(at::equal(copies[i], tensors[i])) << i;
}

// On a GPU the copy is enqueued on the current stream: kernels queued after it (the next step) cannot change what
// it copies, and the host buffer is pinned.
TEST(HostStaging, GpuCopiesAreTakenBeforeLaterKernelsOnTheStream) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  ckpt::HostStaging staging;
  at::Tensor live = at::randn({64, 1024, 1024}, at::TensorOptions().device(at::kCUDA));
  const at::Tensor expected = live.cpu();
  staging.reserve(ckpt::tensor_sizes({{"w", live}}), /*pinned=*/true);
  const at::Tensor copy = staging.stage(live);
  staging.record();
  live.mul_(2).add_(1);  // queued behind the copy
  staging.wait_copied();
  EXPECT_TRUE(copy.is_pinned());
  EXPECT_TRUE(at::equal(copy, expected));
}

TEST(HostStaging, HostMemoryAvailableIsReadFromTheKernel) {
  const auto available = ckpt::host_memory_available();
  ASSERT_TRUE(available.has_value());
  EXPECT_GT(*available, 0);
}

TEST(BackgroundWriter, RunsOneJobAtATimeAndWaitsForTheLastWhenDestroyed) {
  std::atomic<int> running{0}, most{0}, done{0};
  auto job = [&] {
    most = std::max(most.load(), ++running);
    std::this_thread::sleep_for(30ms);
    --running;
    ++done;
  };
  {
    ckpt::BackgroundWriter writer;
    writer.submit(job);
    EXPECT_GT(writer.submit(job), 0.0);  // waited for the first
    writer.submit(job);
  }  // the destructor waits for the third
  EXPECT_EQ(done.load(), 3);
  EXPECT_EQ(most.load(), 1);
}

TEST(BackgroundWriter, AFailureReachesTheCallerOnce) {
  ckpt::BackgroundWriter writer;
  writer.submit([] { throw Error("disk on fire", "put it out"); });
  try {
    writer.wait();
    FAIL() << "the job's failure was not rethrown";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "disk on fire");
    EXPECT_EQ(e.hint(), "put it out");
  }
  EXPECT_NO_THROW(writer.wait());
  writer.submit([] { throw Error("again"); });
  while (writer.busy()) std::this_thread::sleep_for(1ms);
  EXPECT_THROW(writer.rethrow_if_failed(), Error);
  EXPECT_NO_THROW(writer.rethrow_if_failed());
}

// A save of `value`: one tensor file and one text file.
ckpt::SaveRequest request(int64_t step, const at::Tensor& value) {
  ckpt::SaveRequest r;
  r.step = step;
  r.tensors = {{"w", value}};
  r.write = [](const fs::path& dir, const ckpt::NamedTensors& tensors) {
    FileDigests digests{
        {dir / "w.safetensors", io::write_safetensors(dir / "w.safetensors", io::TensorMap(tensors.begin(), tensors.end()))}};
    ft::write_file(dir / "note.txt", "hello");  // hashed by the manifest
    return digests;
  };
  return r;
}

std::unique_ptr<ckpt::CheckpointWriter> writer_in(const fs::path& run, bool background) {
  return std::make_unique<ckpt::CheckpointWriter>(std::make_unique<ckpt::CheckpointStore>(run, ckpt::CheckpointStoreOptions{}),
                                                  std::make_shared<dist::SingleProcessCommunicator>(), 0, 1,
                                                  ckpt::CheckpointWriterOptions{background, false, 60});
}

TEST(CheckpointWriter, BackgroundSaveWritesTheStateOfTheCallEvenWhenChangedAfter) {
  ScratchDir sync_run, async_run;
  at::Tensor live = at::arange(1000, at::kFloat);
  writer_in(sync_run.path(), false)->save(request(5, live));
  auto background = writer_in(async_run.path(), true);
  background->save(request(5, live));
  live.mul_(-1);  // training goes on while the files are written
  background->wait();
  const fs::path a = sync_run.path() / "checkpoints" / "step-000005";
  const fs::path b = async_run.path() / "checkpoints" / "step-000005";
  ASSERT_TRUE(ckpt::CheckpointStore::verify(b).ok);
  EXPECT_EQ(read_file(a / "w.safetensors"), read_file(b / "w.safetensors"));
  EXPECT_EQ(read_file(b / "note.txt"), "hello");
}

TEST(CheckpointWriter, FailedBackgroundSaveIsReportedAtTheNextSaveAndKeepsThePreviousCheckpoint) {
  ScratchDir run;
  auto writer = writer_in(run.path(), true);
  writer->save(request(10, at::ones({4})));
  ckpt::SaveRequest broken = request(20, at::ones({4}));
  broken.write = [](const fs::path& dir, const ckpt::NamedTensors&) -> FileDigests {
    throw Error("cannot write '" + (dir / "w.safetensors").string() + "': No space left on device", "free space");
  };
  writer->save(std::move(broken));
  try {
    writer->save(request(30, at::ones({4})));
    FAIL() << "the failed save was not reported";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("checkpoint of step 20 not saved"), std::string::npos) << message;
    // The temporary directory is gone: the message names the checkpoint it was to become.
    EXPECT_NE(message.find("step-000020/w.safetensors"), std::string::npos) << message;
    EXPECT_NE(e.hint().find("step-000010 is intact"), std::string::npos) << e.hint();
  }
  EXPECT_TRUE(ckpt::CheckpointStore::verify(run.path() / "checkpoints" / "step-000010").ok);
  EXPECT_FALSE(fs::exists(run.path() / "checkpoints" / "step-000020"));
}

}  // namespace
}  // namespace ft::test
