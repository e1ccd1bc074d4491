// How fast a checkpoint reaches the disk: a synchronous CheckpointWriter save of GB gigabytes of F32 tensors in two
// safetensors files (a third "model", two thirds "optimizer", as a full fine-tune with AdamW writes), split into its
// phases: the tensor files written (with their checksums), then the commit (fsync, manifest, rename).
// Compare the total with the disk's sequential write speed (dd if=/dev/zero of=F bs=64M count=N oflag=direct).
// Usage: bench_ckpt_write DIR [GB] (default 4)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "ckpt/checkpoint_writer.h"
#include "dist/comm.h"
#include "io/safetensors.h"
#include "util/fs.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_ckpt_write DIR [GB]\n");
    return 2;
  }
  const std::filesystem::path run = argv[1];
  const double gb = argc > 2 ? std::atof(argv[2]) : 4.0;
  const int64_t floats = static_cast<int64_t>(gb * 1e9 / 4 / 3 / 64) * 64;  // per "third"
  ft::ckpt::NamedTensors tensors;
  for (int i = 0; i < 3; ++i) tensors.emplace("t" + std::to_string(i), at::rand({floats}, at::kFloat));
  double write_s = 0;
  ft::ckpt::SaveRequest request;
  request.step = 1;
  request.tensors = tensors;
  request.write = [&](const std::filesystem::path& dir, const ft::ckpt::NamedTensors& t) {
    const auto start = std::chrono::steady_clock::now();
    ft::FileDigests digests;
    digests.emplace(dir / "model.safetensors", ft::io::write_safetensors(dir / "model.safetensors", {{"t0", t.at("t0")}}));
    digests.emplace(dir / "optimizer.safetensors",
                    ft::io::write_safetensors(dir / "optimizer.safetensors", {{"t1", t.at("t1")}, {"t2", t.at("t2")}}));
    write_s = seconds_since(start);
    return digests;
  };
  ft::ckpt::CheckpointWriter writer(std::make_unique<ft::ckpt::CheckpointStore>(run, ft::ckpt::CheckpointStoreOptions{}),
                                    std::make_shared<ft::dist::SingleProcessCommunicator>(), 0, 1,
                                    ft::ckpt::CheckpointWriterOptions{});
  const auto start = std::chrono::steady_clock::now();
  writer.save(std::move(request));
  const double total_s = seconds_since(start);
  const double bytes = 3.0 * static_cast<double>(floats) * 4;
  std::printf("checkpoint of %.2f GB: %.2f s (%.2f GB/s); tensor files %.2f s, commit %.2f s\n",
              bytes / 1e9, total_s, bytes / 1e9 / total_s, write_s, total_s - write_s);
  ft::remove_tree(run / "checkpoints");
  return 0;
}
