// The safetensors reader/writer: round trips, sharded checkpoints and every malformed-file case.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/mapped_file.h"
#include "io/raw_safetensors.h"
#include "io/safetensors.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ft::test {
namespace {

// Expects opening `path` to throw ft::Error whose message contains every one of `words`.
void expect_error(const std::filesystem::path& path, std::vector<std::string> words) {
  try {
    io::SafetensorsFile f(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const Error& e) {
    const std::string msg = e.what();
    words.push_back(path.filename().string());
    for (const auto& w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
  }
}

TEST(Safetensors, RoundTripKeepsDtypesShapesValuesAndMetadata) {
  TempDir dir;
  io::TensorMap in;
  in["b.f32"] = at::arange(12, at::kFloat).view({3, 4});
  in["a.bf16"] = at::linspace(-2, 2, 10).to(at::kBFloat16);
  in["c.f16"] = at::linspace(-1, 1, 7).to(at::kHalf).view({7, 1});
  in["d.i64"] = at::arange(5, at::kLong);
  in["e.empty"] = at::empty({0, 3});
  io::write_safetensors(dir / "x.safetensors", in, {{"format", "pt"}, {"step", "7"}});
  io::Metadata meta;
  const auto out = io::read_safetensors(dir / "x.safetensors", &meta);
  ASSERT_EQ(out.size(), in.size());
  for (const auto& [name, t] : in) {
    const auto& got = out.at(name);
    EXPECT_EQ(got.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(got.sizes(), t.sizes()) << name;
    EXPECT_TRUE(at::equal(got, t)) << name;
  }
  EXPECT_EQ(meta.at("step"), "7");
  // Header padded to 8 bytes, as the Python library writes it.
  std::ifstream f(dir / "x.safetensors", std::ios::binary);
  std::uint64_t len = 0;
  f.read(reinterpret_cast<char*>(&len), 8);
  EXPECT_EQ(len % 8, 0u);
}

TEST(Safetensors, TensorsOutliveTheReaderAndCanBeWritten) {
  TempDir dir;
  io::write_safetensors(dir / "x.safetensors", {{"w", at::ones({4})}});
  at::Tensor t;
  { t = io::read_safetensors(dir / "x.safetensors").at("w"); }
  t.add_(1);  // copy-on-write mapping: the file keeps its ones
  EXPECT_TRUE(at::equal(t, at::full({4}, 2.0)));
  EXPECT_TRUE(at::equal(io::read_safetensors(dir / "x.safetensors").at("w"), at::ones({4})));
}

// Writes `in`, reads every tensor back onto `device` with one DeviceReader and expects the stored values.
void expect_read_gives_stored(const io::TensorMap& in, at::Device device) {
  TempDir dir;
  io::write_safetensors(dir / "x.safetensors", in);
  const io::SafetensorsFile file(dir / "x.safetensors");
  io::DeviceReader reader(device);
  for (const auto& [name, t] : in) {
    const at::Tensor got = file.read(name, reader);
    EXPECT_EQ(got.device(), device) << name;
    EXPECT_EQ(got.scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(at::equal(got.cpu(), t)) << name << " on " << device;
  }
}

// Positioned reads split over threads: several 8 MiB pieces and a remainder, a 2-byte dtype of odd length, empty.
TEST(Safetensors, RenamedTensorAnswersToItsNewNameAndACollisionIsRefused) {
  TempDir dir;
  const at::Tensor a = at::arange(6, at::kFloat).view({2, 3}), b = at::ones({4}, at::kBFloat16);
  io::write_safetensors(dir / "t.safetensors", {{"old.a", a}, {"b", b}});
  io::SafetensorsFile f(dir / "t.safetensors");
  f.rename([](const std::string& name) { return name == "old.a" ? std::string("new.a") : name; });
  EXPECT_FALSE(f.contains("old.a"));
  ASSERT_TRUE(f.contains("new.a"));
  EXPECT_TRUE(at::equal(f.tensor("new.a"), a));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"b", "new.a"}));
  EXPECT_THROW(f.rename([](const std::string&) { return std::string("same"); }), ConfigError);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"b", "new.a"})) << "a refused rename leaves the names as they were";
  EXPECT_TRUE(at::equal(f.tensor("new.a"), a));
  EXPECT_TRUE(at::equal(f.tensor("b"), b));
}

TEST(Safetensors, ReadGivesTheStoredTensorOnTheCpu) {
  expect_read_gives_stored({{"pieces", at::randn({(int64_t{20} << 20) / 4 + 3})},
                            {"odd.bf16", at::linspace(-2, 2, 7).to(at::kBFloat16)},
                            {"empty", at::empty({0, 3})}},
                           at::kCPU);
}

// Through the two pinned buffers in turn: three 64 MiB chunks and a remainder, then small tensors after it.
TEST(Safetensors, ReadThroughPinnedBuffersGivesTheStoredTensorOnAGpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  expect_read_gives_stored({{"a.chunks", at::randn({(int64_t{150} << 20) / 2 + 5}).to(at::kBFloat16)},
                            {"b.pieces", at::randn({(int64_t{20} << 20) / 4 + 3})},
                            {"c.odd", at::linspace(-2, 2, 7).to(at::kBFloat16)},
                            {"d.empty", at::empty({0, 3})}},
                           at::Device(at::kCUDA, 0));
}

TEST(Safetensors, ReadPastTheEndOfTheFileNamesIt) {
  TempDir dir;
  io::write_safetensors(dir / "x.safetensors", {{"w", at::ones({4})}});
  const auto mapped = io::MappedFile::open(dir / "x.safetensors");
  std::vector<std::uint8_t> buffer(64);
  try {
    mapped->read(mapped->size() - 8, buffer.data(), 16);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x.safetensors"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, FileShorterThanLengthPrefixIsRejected) {
  TempDir dir;
  write_file(dir / "short.safetensors", "abc");
  expect_error(dir / "short.safetensors", {"fewer than the 8-byte"});
}

TEST(Safetensors, HeaderLongerThanFileIsRejected) {
  TempDir dir;
  write_raw(dir / "h.safetensors", "{}", 0, 1000);
  expect_error(dir / "h.safetensors", {"header length 1000 exceeds"});
}

TEST(Safetensors, TruncatedDataIsRejectedNamingTheTensor) {
  TempDir dir;
  write_raw(dir / "t.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 10);
  expect_error(dir / "t.safetensors", {"'w'", "past the end"});
}

TEST(Safetensors, OverlappingTensorsAreRejected) {
  TempDir dir;
  write_raw(dir / "o.safetensors",
            R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
            16);
  expect_error(dir / "o.safetensors", {"'b'", "overlap", "'a'"});
}

TEST(Safetensors, ShapeDtypeSizeMismatchIsRejected) {
  TempDir dir;
  write_raw(dir / "s.safetensors", R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", 8);
  expect_error(dir / "s.safetensors", {"'w'", "needs 6 bytes", "span 8"});
}

TEST(Safetensors, UnknownDtypeIsRejected) {
  TempDir dir;
  write_raw(dir / "d.safetensors", R"({"w":{"dtype":"F8_E4M3X","shape":[2],"data_offsets":[0,2]}})", 2);
  expect_error(dir / "d.safetensors", {"'w'", "F8_E4M3X"});
}

TEST(Safetensors, InvalidJsonAndMalformedEntriesAreRejected) {
  TempDir dir;
  write_raw(dir / "j.safetensors", R"({"w": {"dtype": )", 0);
  expect_error(dir / "j.safetensors", {"not valid JSON"});
  write_raw(dir / "e.safetensors", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4);
  expect_error(dir / "e.safetensors", {"'w'", "negative"});
  write_raw(dir / "m.safetensors", R"({"w":{"dtype":"F32","shape":[1]}})", 4);
  expect_error(dir / "m.safetensors", {"'w'", "data_offsets"});
}

TEST(Safetensors, MissingFileNamesThePath) {
  TempDir dir;
  expect_error(dir / "none.safetensors", {"cannot open"});
}

TEST(Checkpoint, ShardedWriteSplitsBySizeAndReadsBackThroughIndex) {
  TempDir dir;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (int i = 0; i < 5; ++i) tensors.emplace_back("t" + std::to_string(i), at::full({100}, static_cast<double>(i)));
  io::write_checkpoint(dir.path(), tensors, 800);  // 400 bytes each: two per shard
  EXPECT_TRUE(std::filesystem::exists(dir / "model-00001-of-00003.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir / "model-00003-of-00003.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  const auto index = nlohmann::json::parse(read_file(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), 2000);
  EXPECT_EQ(index["weight_map"]["t4"].get<std::string>(), "model-00003-of-00003.safetensors");
  io::CheckpointReader reader(dir.path());
  ASSERT_EQ(reader.names().size(), 5u);
  for (const auto& [name, t] : tensors) EXPECT_TRUE(at::equal(reader.tensor(name), t)) << name;
  // Re-saving unsharded removes the index so the two layouts never mix.
  io::write_checkpoint(dir.path(), tensors, 0);
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  EXPECT_EQ(io::CheckpointReader(dir.path()).names().size(), 5u);
}

TEST(Checkpoint, IndexNamingAMissingTensorIsRejected) {
  TempDir dir;
  io::write_safetensors(dir / "model-00001-of-00001.safetensors", {{"a", at::ones({2})}});
  write_file(dir / "model.safetensors.index.json",
             R"({"weight_map": {"a": "model-00001-of-00001.safetensors", "b": "model-00001-of-00001.safetensors"}})");
  try {
    io::CheckpointReader reader(dir.path());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
}

// A directory without weights names the files it looked for; one with PyTorch pickles gets their conversion.
TEST(Checkpoint, DirectoryWithoutWeightsSaysWhatIsMissing) {
  TempDir dir;
  try {
    io::CheckpointReader reader(dir.path());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
  // PyTorch pickles there: the hint is the one-line conversion through transformers (model and tokenizer).
  write_file(dir / "pytorch_model.bin", "not read");
  try {
    io::CheckpointReader reader(dir.path());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.hint().find("holds PyTorch pickle weights (pytorch_model.bin)"), std::string::npos) << e.hint();
    EXPECT_NE(e.hint().find("AutoTokenizer as T; d = '" + dir.path().string() + "'"), std::string::npos) << e.hint();
  }
}

}  // namespace
}  // namespace ft::test
