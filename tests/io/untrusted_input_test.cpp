// Model directories and safetensors files made by someone else: every hostile or malformed input is refused with
// the file and entry named, as bad input (exit code 2), before anything large is allocated or anything outside the
// directory is read.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <optional>

#include "io/raw_safetensors.h"
#include "io/safetensors.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ft::test {
namespace {

namespace fs = std::filesystem;

// Runs `open`, expecting an ft::Error with exactly `message` and exit code 2 (bad input).
void expect_refused(const std::function<void()>& open, const std::string& message) {
  try {
    open();
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
    EXPECT_EQ(e.code(), ExitCode::kUsage) << e.what();
  }
}

void expect_file_refused(const fs::path& path, const std::string& what) {
  expect_refused([&] { io::SafetensorsFile f(path); }, "invalid safetensors file " + path.string() + what);
}

long max_rss_kib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

TEST(UntrustedSafetensors, HeaderClaiming2To60BytesFailsFastWithoutAllocating) {
  TempDir dir;
  write_raw(dir / "h.safetensors", "{}", 0, 1ull << 60);
  const long rss_before = max_rss_kib();
  const auto start = std::chrono::steady_clock::now();
  expect_file_refused(dir / "h.safetensors", ": header length 1152921504606846976 exceeds the limit of 100000000 bytes");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_LT(max_rss_kib() - rss_before, 16 * 1024) << "KiB of peak memory grew while refusing the header";
}

TEST(UntrustedSafetensors, HeaderLongerThanTheFileIsRefused) {
  TempDir dir;
  write_raw(dir / "h.safetensors", "{}", 0, 1000);
  expect_file_refused(dir / "h.safetensors", ": header length 1000 exceeds the file size 10");
}

TEST(UntrustedSafetensors, ShapeWhoseByteSizeOverflowsIsRefused) {
  TempDir dir;
  // 2^31 x 2^31 elements of 4 bytes: 2^64 bytes.
  write_raw(dir / "o.safetensors", R"({"w":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,0]}})",
            0);
  expect_file_refused(dir / "o.safetensors",
                      ", tensor 'w': shape [2147483648,2147483648] x 4-byte elements overflows a 64-bit byte count");
  // One dimension alone: 2^61 doubles.
  write_raw(dir / "d.safetensors", R"({"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})", 0);
  expect_file_refused(dir / "d.safetensors",
                      ", tensor 'w': shape [2305843009213693952] x 8-byte elements overflows a 64-bit byte count");
}

TEST(UntrustedSafetensors, HugeDimensionBesideAZeroDimensionIsRefused) {
  TempDir dir;
  // Zero elements, but the second dimension does not fit LibTorch's int64 sizes.
  write_raw(dir / "z.safetensors",
            R"({"w":{"dtype":"F32","shape":[0,18446744073709551615],"data_offsets":[0,0]}})", 0);
  expect_file_refused(dir / "z.safetensors",
                      ", tensor 'w': shape [0,18446744073709551615] x 4-byte elements overflows a 64-bit byte count");
}

TEST(UntrustedSafetensors, DataOffsetsThatEndBeforeTheyBeginAreRefused) {
  TempDir dir;
  write_raw(dir / "b.safetensors", R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}})", 8);
  expect_file_refused(dir / "b.safetensors", ", tensor 'w': data_offsets [8, 4] end before they begin");
}

TEST(UntrustedSafetensors, DataOffsetsPastTheEndOfTheFileAreRefused) {
  TempDir dir;
  write_raw(dir / "p.safetensors", R"({"w":{"dtype":"U8","shape":[16],"data_offsets":[1152921504606846976,1152921504606846992]}})", 16);
  expect_file_refused(dir / "p.safetensors",
                      ", tensor 'w': data_offsets [1152921504606846976, 1152921504606846992) run past the end of the "
                      "data (16 bytes)");
}

TEST(UntrustedSafetensors, OffsetsThatDisagreeWithShapeAndDtypeAreRefused) {
  TempDir dir;
  write_raw(dir / "s.safetensors", R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 12);
  expect_file_refused(dir / "s.safetensors", ", tensor 'w': shape x dtype needs 16 bytes but data_offsets span 12");
}

TEST(UntrustedSafetensors, OverlappingTensorsAreRefused) {
  TempDir dir;
  write_raw(dir / "o.safetensors",
            R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
            8);
  expect_file_refused(dir / "o.safetensors", ", tensor 'b': its bytes overlap tensor 'a'");
}

TEST(UntrustedSafetensors, AGapBetweenTensorsIsRefused) {
  TempDir dir;
  write_raw(dir / "g.safetensors",
            R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})",
            12);
  expect_file_refused(dir / "g.safetensors",
                      ", tensor 'b': data_offsets begin at 8 but the previous tensor 'a' ends at 4 (a gap in the data)");
}

TEST(UntrustedSafetensors, BytesAfterTheLastTensorAreRefused) {
  TempDir dir;
  write_raw(dir / "t.safetensors", R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 8);
  expect_file_refused(dir / "t.safetensors",
                      ": the tensors cover 4 bytes of data but the file holds 8 after the header");
}

TEST(UntrustedSafetensors, TensorsListedOutOfOffsetOrderAreAccepted) {
  TempDir dir;  // the format orders by offsets, not by the header's key order
  write_raw(dir / "r.safetensors",
            R"({"z":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"a":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
            6);
  io::SafetensorsFile f(dir / "r.safetensors");
  EXPECT_EQ(f.info("a").begin, 4u);
  EXPECT_EQ(f.info("z").end, 4u);
}

TEST(UntrustedSafetensors, UnknownDtypeIsRefusedAsBadInput) {
  TempDir dir;
  write_raw(dir / "d.safetensors", R"({"w":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", 8);
  expect_refused([&] { io::SafetensorsFile f(dir / "d.safetensors"); },
                 "unsupported safetensors dtype 'C64' in " + (dir / "d.safetensors").string() + ", tensor 'w'");
}

TEST(UntrustedSafetensors, DuplicateTensorNamesAreRefused) {
  TempDir dir;
  write_raw(dir / "n.safetensors",
            R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
            8);
  expect_file_refused(dir / "n.safetensors", ", tensor 'w': the header lists this name twice");
}

// ---- Sharded and single-file model directories ----

// A model directory with one valid shard, "model-00001-of-00001.safetensors" holding tensor "a", and an index
// whose weight_map maps "a" there and "b" to `b_shard`; a valid safetensors file "outside.safetensors" lies beside
// the model directory.
struct HostileIndex {
  TempDir root;
  fs::path model = root / "model";
  fs::path index = model / "model.safetensors.index.json";

  explicit HostileIndex(const std::string& b_shard) {
    fs::create_directories(model);
    io::write_safetensors(model / "model-00001-of-00001.safetensors", {{"a", at::ones({2})}});
    io::write_safetensors(root / "outside.safetensors", {{"b", at::ones({2})}});
    write_file(index, R"({"weight_map": {"a": "model-00001-of-00001.safetensors", "b": )" +
                          nlohmann_quote(b_shard) + "}}");
  }
  static std::string nlohmann_quote(const std::string& s) { return "\"" + s + "\""; }

  std::string refusal(const std::string& shard, const std::string& problem) const {
    return index.string() + ": weight_map entry 'b' names '" + shard + "': " + problem;
  }
};

TEST(UntrustedIndex, ShardWithDotDotIsRefusedNamingIndexAndEntry) {
  HostileIndex d("../outside.safetensors");
  expect_refused([&] { io::CheckpointReader r(d.model); },
                 d.refusal("../outside.safetensors", "a '..' component would leave the directory"));
  HostileIndex up("..");
  expect_refused([&] { io::CheckpointReader r(up.model); }, up.refusal("..", "a '..' component would leave the directory"));
}

TEST(UntrustedIndex, AbsoluteShardPathIsRefused) {
  HostileIndex d("/etc/passwd");
  expect_refused([&] { io::CheckpointReader r(d.model); },
                 d.refusal("/etc/passwd", "an absolute path is not allowed"));
}

TEST(UntrustedIndex, ShardWithADirectoryComponentIsRefused) {
  HostileIndex d("sub/model-00002-of-00002.safetensors");
  fs::create_directories(d.model / "sub");
  io::write_safetensors(d.model / "sub" / "model-00002-of-00002.safetensors", {{"b", at::ones({2})}});
  expect_refused([&] { io::CheckpointReader r(d.model); },
                 d.refusal("sub/model-00002-of-00002.safetensors",
                           "a directory component is not allowed (shards are plain file names in the same directory, "
                           "such as model-00001-of-00004.safetensors)"));
}

TEST(UntrustedIndex, ShardThatIsASymlinkLeavingTheDirectoryIsRefused) {
  HostileIndex d("model-00002-of-00002.safetensors");
  fs::create_symlink(d.root / "outside.safetensors", d.model / "model-00002-of-00002.safetensors");
  const std::string real_root = fs::canonical(d.root.path()).string();
  expect_refused([&] { io::CheckpointReader r(d.model); },
                 d.refusal("model-00002-of-00002.safetensors", "it resolves to " + real_root +
                                                                   "/outside.safetensors, outside " + real_root +
                                                                   "/model (a symlink leaving the directory)"));
}

TEST(UntrustedIndex, ShardThatIsASymlinkInsideTheDirectoryIsAccepted) {
  HostileIndex d("model-00002-of-00002.safetensors");
  io::write_safetensors(d.model / "real.safetensors", {{"b", at::full({2}, 3.0)}});
  fs::create_symlink("real.safetensors", d.model / "model-00002-of-00002.safetensors");
  io::CheckpointReader r(d.model);
  EXPECT_TRUE(at::equal(r.tensor("b"), at::full({2}, 3.0)));
}

TEST(UntrustedModelDir, SingleFileThatIsASymlinkLeavingTheDirectoryIsRefused) {
  TempDir root;
  fs::create_directories(root / "model");
  io::write_safetensors(root / "outside.safetensors", {{"a", at::ones({2})}});
  fs::create_symlink("../outside.safetensors", root / "model" / "model.safetensors");
  expect_refused([&] { io::CheckpointReader r(root / "model"); },
                 (root / "model" / "model.safetensors").string() + " resolves outside " + (root / "model").string() +
                     " (a symlink leaving the directory)");
}

TEST(UntrustedModelDir, HubCacheSnapshotWhoseFilesLinkIntoBlobsIsAccepted) {
  // huggingface_hub's cache: <repo>/snapshots/<revision>/<file> -> ../../blobs/<hash>.
  TempDir root;
  const fs::path repo = root / "models--org--name";
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "snapshots" / "abc123");
  io::write_safetensors(repo / "blobs" / "f00d", {{"a", at::ones({2})}});
  fs::create_symlink("../../blobs/f00d", repo / "snapshots" / "abc123" / "model.safetensors");
  io::CheckpointReader r(repo / "snapshots" / "abc123");
  EXPECT_TRUE(at::equal(r.tensor("a"), at::ones({2})));
  // ... but not a link that leaves the repository.
  io::write_safetensors(root / "elsewhere.safetensors", {{"a", at::ones({2})}});
  fs::create_directories(repo / "snapshots" / "def456");
  fs::create_symlink("../../../elsewhere.safetensors", repo / "snapshots" / "def456" / "model.safetensors");
  EXPECT_THROW(io::CheckpointReader(repo / "snapshots" / "def456"), ConfigError);
}

TEST(UntrustedIndex, TensorListedTwiceInTheWeightMapIsRefused) {
  HostileIndex d("model-00001-of-00001.safetensors");
  write_file(d.index, R"({"metadata": {"a": 1, "a": 2}, "weight_map": {"a": "model-00001-of-00001.safetensors",
                          "a": "other.safetensors"}})");
  expect_refused([&] { io::CheckpointReader r(d.model); },
                 d.index.string() + ": weight_map lists tensor 'a' twice");
  // A repeated key elsewhere in the index (metadata) is not about tensors: accepted as JSON reads it.
  write_file(d.index, R"({"metadata": {"a": 1, "a": 2}, "weight_map": {"a": "model-00001-of-00001.safetensors"}})");
  io::CheckpointReader r(d.model);
  EXPECT_TRUE(at::equal(r.tensor("a"), at::ones({2})));
}

TEST(UntrustedIndex, EveryShardNameIsCheckedBeforeAnyShardIsOpened) {
  // "b" names a hostile path and sorts after "a": the valid shard of "a" must not be opened first and then
  // half-used; the error is about the path, not about a shard's contents.
  HostileIndex d("../outside.safetensors");
  write_file(d.model / "model-00001-of-00001.safetensors", "not a safetensors file");
  expect_refused([&] { io::CheckpointReader r(d.model); },
                 d.refusal("../outside.safetensors", "a '..' component would leave the directory"));
}

}  // namespace
}  // namespace ft::test
