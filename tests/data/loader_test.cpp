// Batches: packing layout (rows, positions, segments, labels) exact, padding, sampler sharding, determinism,
// reshuffle, and resume giving the same following batches.
#include <gtest/gtest.h>

#include <set>

#include "data/batch_source.h"
#include "data/loader.h"
#include "data_test_util.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

using data::TokenizedDataset;

// A pretokenized-free dataset of known samples: "text" records whose tokens we read back.
struct Samples {
  TempDir dir{"ft-ld"};
  std::unique_ptr<tok::Tokenizer> tok = load_test_tokenizer();
  std::shared_ptr<const TokenizedDataset> ds;
  explicit Samples(int n, int64_t seq_len = 32) {
    std::string lines;
    for (int i = 0; i < n; ++i) {
      lines += nlohmann::json{{"prompt", "p" + std::to_string(i)}, {"completion", std::string(1 + i % 3, 'x')}}.dump() +
               "\n";
    }
    write_file(dir / "d.jsonl", lines);
    data::DatasetOptions o;
    o.sources = {{(dir / "d.jsonl").string(), SourceFormat::kPromptCompletion, 1.0}};
    o.cache_dir = dir / "cache";
    o.seq_len = seq_len;
    ds = TokenizedDataset::build(o, *tok);
  }
  std::pair<std::vector<int32_t>, std::vector<uint8_t>> get(int64_t i) const {
    std::pair<std::vector<int32_t>, std::vector<uint8_t>> s;
    ds->get(i, s.first, s.second);
    return s;
  }
};

std::vector<int64_t> row(const at::Tensor& t, int64_t b) {
  auto r = t[b].to(at::kLong).contiguous();
  return {r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel()};
}

TEST(Loader, PackedRowsKeepSamplesApart) {
  Samples s(3);
  const auto a = s.get(0), b = s.get(1);
  const auto la = static_cast<int64_t>(a.first.size()), lb = static_cast<int64_t>(b.first.size());
  const int64_t T = la + lb + 3;
  const auto batch = data::collate(*s.ds, {{0, 1}, {2}}, {T, /*packing=*/true, s.tok->pad_id()});
  ASSERT_EQ(batch.input_ids.size(0), 2);
  ASSERT_EQ(batch.input_ids.size(1), T);
  std::vector<int64_t> ids, pos, seg, labels;
  for (int64_t t = 0; t < la; ++t) {
    ids.push_back(a.first[static_cast<size_t>(t)]);
    pos.push_back(t);
    seg.push_back(0);
    labels.push_back(t + 1 < la && a.second[static_cast<size_t>(t + 1)] ? a.first[static_cast<size_t>(t + 1)] : -100);
  }
  for (int64_t t = 0; t < lb; ++t) {
    ids.push_back(b.first[static_cast<size_t>(t)]);
    pos.push_back(t);
    seg.push_back(1);
    labels.push_back(t + 1 < lb && b.second[static_cast<size_t>(t + 1)] ? b.first[static_cast<size_t>(t + 1)] : -100);
  }
  for (int64_t t = 0; t < 3; ++t) {
    ids.push_back(s.tok->pad_id());
    pos.push_back(t);
    seg.push_back(2);
    labels.push_back(-100);
  }
  EXPECT_EQ(row(batch.input_ids, 0), ids);
  EXPECT_EQ(row(batch.position_ids, 0), pos);
  EXPECT_EQ(row(batch.segment_ids, 0), seg);
  EXPECT_EQ(row(batch.labels, 0), labels);
  EXPECT_EQ(labels[static_cast<size_t>(la - 1)], -100);  // the last token of A does not predict B's BOS
  EXPECT_EQ(batch.segment_ids.scalar_type(), at::kInt);
  EXPECT_EQ(batch.num_samples, 3);
  EXPECT_EQ(batch.num_target_tokens, (batch.labels != -100).sum().item<int64_t>());
}

TEST(Loader, UnpackedBatchesArePaddedToTheLongest) {
  Samples s(3);
  const auto batch = data::collate(*s.ds, {{0}, {2}}, {32, /*packing=*/false, s.tok->pad_id()});
  const auto l0 = s.get(0).first.size(), l2 = s.get(2).first.size();
  ASSERT_EQ(batch.input_ids.size(1), static_cast<int64_t>(std::max(l0, l2)));
  EXPECT_FALSE(batch.segment_ids.defined());
  const auto r0 = row(batch.input_ids, 0), lab0 = row(batch.labels, 0);
  for (size_t t = l0; t < r0.size(); ++t) {
    EXPECT_EQ(r0[t], s.tok->pad_id());
    EXPECT_EQ(lab0[t], -100);
  }
  EXPECT_NE(s.tok->pad_id(), s.tok->eos_id());
}

// Three samples of 37 tokens (pretokenized data is cut into rows of seq_len).
struct Rows37 {
  TempDir dir{"ft-ld-pad"};
  std::unique_ptr<tok::Tokenizer> tok = load_test_tokenizer();
  std::shared_ptr<const TokenizedDataset> ds;
  Rows37() {
    std::vector<uint16_t> ids(3 * 37);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint16_t>(5 + i % 20);
    write_file(dir / "p.bin", std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(uint16_t)));
    data::DatasetOptions o;
    o.sources = {{(dir / "p.bin").string(), SourceFormat::kPretokenized, 1.0}};
    o.seq_len = 37;
    ds = TokenizedDataset::build(o, *tok);
  }
  data::Batch collate(int64_t pad_multiple, int64_t seq_len = 64) const {  // unpacked
    return data::collate(*ds, {{0}, {1}, {2}}, {seq_len, /*packing=*/false, tok->pad_id(), pad_multiple});
  }
};

TEST(Loader, UnpackedBatchesArePaddedToAMultiple) {
  Rows37 s;
  ASSERT_EQ(s.ds->size(), 3);
  const auto batch = s.collate(16);
  ASSERT_EQ(batch.input_ids.size(1), 48);
  const auto exact = s.collate(1);
  ASSERT_EQ(exact.input_ids.size(1), 37);
  // The real tokens are as without the multiple; the tail is padding without loss.
  EXPECT_TRUE(batch.input_ids.narrow(1, 0, 37).equal(exact.input_ids));
  EXPECT_TRUE(batch.labels.narrow(1, 0, 37).equal(exact.labels));
  EXPECT_TRUE(batch.position_ids.narrow(1, 0, 37).equal(exact.position_ids));
  EXPECT_TRUE(batch.input_ids.narrow(1, 37, 11).eq(s.tok->pad_id()).all().item<bool>());
  EXPECT_TRUE(batch.labels.narrow(1, 37, 11).eq(data::kIgnoreIndex).all().item<bool>());
  EXPECT_EQ(row(batch.position_ids, 1).back(), 47);  // the padding tail keeps counting, as without the multiple
  EXPECT_EQ(batch.num_target_tokens, exact.num_target_tokens);
  EXPECT_FALSE(batch.segment_ids.defined());
}

TEST(Loader, PaddingToAMultipleStopsAtTheCapButNotBelowTheLongestRow) {
  Rows37 s;
  EXPECT_EQ(s.collate(16, /*seq_len=*/40).input_ids.size(1), 40);  // 48 capped
  EXPECT_EQ(s.collate(64, /*seq_len=*/20).input_ids.size(1), 37);  // a cap below the longest row: the row wins
  EXPECT_EQ(s.collate(37).input_ids.size(1), 37);                  // already a multiple
}

TEST(Loader, PackedRowsStaySeqLenLong) {
  Rows37 s;
  const auto batch = data::collate(*s.ds, {{0}, {1}}, {80, /*packing=*/true, s.tok->pad_id(), /*pad_multiple=*/16});
  EXPECT_EQ(batch.input_ids.size(1), 80);  // not 48, the longest row's 37 tokens rounded up
  EXPECT_TRUE(batch.segment_ids.defined());
}

TEST(Loader, PadMultipleAutoIs64OnCudaAnd1OnTheCpu) {
  EXPECT_EQ(data::resolve_pad_multiple(0, /*cuda=*/true), 64);
  EXPECT_EQ(data::resolve_pad_multiple(0, /*cuda=*/false), 1);
  EXPECT_EQ(data::resolve_pad_multiple(16, /*cuda=*/true), 16);
  EXPECT_EQ(data::resolve_pad_multiple(8, /*cuda=*/false), 8);
  Config cfg;
  cfg.data.pad_to_multiple_of = 32;
  EXPECT_EQ(data::LoaderOptions::from_config(cfg, 0, 0, 1, /*pin_memory=*/false, true).pad_multiple, 32);
  cfg.data.pad_to_multiple_of = 0;
  EXPECT_EQ(data::LoaderOptions::from_config(cfg, 0, 0, 1, /*pin_memory=*/true, true).pad_multiple, 64);
}

// The loader passes its multiple on: every unpacked batch is a multiple of it long (or seq_len).
TEST(Loader, LoaderPadsUnpackedBatchesToItsMultiple) {
  Samples s(23);
  data::LoaderOptions o;
  o.micro_batch_size = 3;
  o.seq_len = 32;
  o.pad_id = s.tok->pad_id();
  o.pad_multiple = 8;
  data::DataLoader loader(s.ds, o);
  int64_t batches = 0;
  while (auto b = loader.next()) {
    EXPECT_EQ(b->input_ids.size(1) % 8, 0);
    ++batches;
  }
  EXPECT_EQ(batches, loader.batches_per_epoch());
}

TEST(Sampler, ShardsCoverEverySampleOnceAndReshuffle) {
  const int64_t n = 10, world = 3;
  std::multiset<int64_t> seen;
  for (int64_t r = 0; r < world; ++r) {
    data::DistributedSampler s(n, 7, r, world);
    const auto idx = s.indices(0);
    EXPECT_EQ(static_cast<int64_t>(idx.size()), 4);
    EXPECT_EQ(idx, data::DistributedSampler(n, 7, r, world).indices(0));  // deterministic
    seen.insert(idx.begin(), idx.end());
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_GE(seen.count(i), 1u) << i;
  EXPECT_EQ(seen.size(), 12u);  // 2 wrap-around repeats keep the ranks in step
  data::DistributedSampler s(100, 7, 0, 1);
  EXPECT_NE(s.indices(0), s.indices(1));
  EXPECT_NE(s.indices(0), data::DistributedSampler(100, 8, 0, 1).indices(0));
  data::DistributedSampler plain(5, 7, 0, 1, /*shuffle=*/false);
  EXPECT_EQ(plain.indices(3), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

std::vector<std::vector<int64_t>> drain(data::DataLoader& l, int64_t batches) {
  std::vector<std::vector<int64_t>> out;
  while (static_cast<int64_t>(out.size()) < batches) {
    auto b = l.next();
    if (!b) {
      out.push_back({-1});  // epoch boundary marker
      continue;
    }
    auto flat = b->input_ids.flatten().contiguous();
    out.emplace_back(flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel());
  }
  return out;
}

TEST(Loader, RestoredStateContinuesWithTheSameBatches) {
  Samples s(23);
  for (bool packing : {false, true}) {
    data::LoaderOptions o;
    o.micro_batch_size = 3;
    o.seq_len = 32;
    o.packing = packing;
    o.pad_id = s.tok->pad_id();
    o.seed = 11;
    o.rank = 1;
    o.world_size = 2;
    o.prefetch = 2;
    data::DataLoader full(s.ds, o);
    const auto reference = drain(full, 3 * full.batches_per_epoch());
    data::DataLoader first(s.ds, o);
    const int64_t k = full.batches_per_epoch() + 2;  // mid second epoch
    const auto head = drain(first, k);
    EXPECT_EQ(head, std::vector<std::vector<int64_t>>(reference.begin(), reference.begin() + k));
    const auto state = first.state_dict();
    data::DataLoader resumed(s.ds, o);
    resumed.load_state_dict(state);
    const auto tail = drain(resumed, static_cast<int64_t>(reference.size()) - k);
    EXPECT_EQ(tail, std::vector<std::vector<int64_t>>(reference.begin() + k, reference.end())) << packing;
    // Epochs differ (reshuffled) and ranks shard: rank 0 sees other rows than rank 1.
    o.rank = 0;
    data::DataLoader other(s.ds, o);
    EXPECT_NE(drain(other, 2), std::vector<std::vector<int64_t>>(reference.begin(), reference.begin() + 2));
  }
}

// A saved position means a place in one data order: under another seed or micro-batch size it is refused as a
// configuration error (exit code 2) naming the setting.
TEST(Loader, StateOfAnotherDataOrderIsAConfigErrorNamingTheSetting) {
  Samples s(23);
  data::LoaderOptions o;
  o.micro_batch_size = 3;
  o.seq_len = 32;
  o.seed = 11;
  const auto state = data::DataLoader(s.ds, o).state_dict();
  o.seed = 12;
  data::DataLoader reseeded(s.ds, o);
  EXPECT_THROW(reseeded.load_state_dict(state), ConfigError);
  expect_error_contains([&] { reseeded.load_state_dict(state); }, {"run.seed was 11 and is now 12"});
  o.seed = 11;
  o.micro_batch_size = 4;
  data::DataLoader wider(s.ds, o);
  expect_error_contains([&] { wider.load_state_dict(state); }, {"train.micro_batch_size was 3 and is now 4"});
}

// Found by CI's fuzzing: a position written as a float outside int64's range was converted with a plain cast
// (undefined behaviour); a state that is not a JSON integer where one belongs is refused as damaged.
TEST(Loader, StateWithNonIntegerPositionsIsRefusedAsDamaged) {
  Samples s(23);
  data::LoaderOptions o;
  o.micro_batch_size = 3;
  o.seq_len = 32;
  data::DataLoader loader(s.ds, o);
  for (const nlohmann::json& bad : {nlohmann::json(1e300), nlohmann::json(-1.5), nlohmann::json("3")}) {
    auto state = loader.state_dict();
    state["epoch"] = bad;
    expect_error_contains([&] { loader.load_state_dict(state); }, {"invalid data loader state", "epoch"});
    state = loader.state_dict();
    state["seed"] = nlohmann::json(-1);
    expect_error_contains([&] { loader.load_state_dict(state); }, {"invalid data loader state", "-1"});
  }
}

// A source whose batches cannot be made (a file that went away under a running job, say).
class FailingSource : public data::BatchSource {
 public:
  int64_t size() const override { return 4; }
  int64_t length(int64_t) const override { return 4; }
  int64_t seq_len() const override { return 4; }
  data::Batch collate(const data::RowPlan&, const data::CollateOptions&) const override {
    throw Error("p.bin: cannot read row 0");
  }
};

TEST(Loader, WorkerErrorsSurfaceInNext) {
  data::LoaderOptions lo;
  lo.micro_batch_size = 1;
  lo.seq_len = 4;
  data::DataLoader loader(std::make_shared<FailingSource>(), lo);
  try {
    loader.next();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("p.bin"), std::string::npos) << e.what();
  }
}

// Pretokenized ids past the tokenizer's vocabulary are found when the file is opened, with the first one's index.
TEST(Loader, PretokenizedIdsOutsideTheVocabularyAreRefusedAtOpen) {
  TempDir dir("ft-ld-vocab");
  std::vector<uint16_t> tokens(64, 1);
  tokens[3] = 60000;
  tokens[51] = 60001;
  write_file(dir / "p.bin", std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2));
  const auto tok = load_test_tokenizer();
  data::DatasetOptions o;
  o.sources = {{(dir / "p.bin").string(), SourceFormat::kPretokenized, 1.0}};
  o.seq_len = 4;
  expect_error_contains([&] { TokenizedDataset::build(o, *tok); },
                        {"p.bin: token 60000 at index 3 is outside the tokenizer's vocabulary"});
}

}  // namespace
}  // namespace ft::test
