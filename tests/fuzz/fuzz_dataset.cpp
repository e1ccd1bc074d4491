// A dataset cache entry (the tokenized form of a JSON Lines file that later runs reuse) and the data loader's
// checkpoint state. Mode byte % 5: 0-3 the payload replaces meta.json, tokens.bin, loss.bin or offsets.bin of a
// valid entry, which is then opened (and every sample read); 4 the payload is the loader's state_dict from
// trainer_state.json, restored into a loader over a valid dataset that then yields a few batches.
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/loader.h"
#include "fuzz_data.h"

namespace ft::fuzz {
namespace {

namespace fs = std::filesystem;

const char* const kEntryFiles[] = {"meta.json", "tokens.bin", "loss.bin", "offsets.bin"};

std::unique_ptr<tok::Tokenizer> tokenizer;
data::DatasetOptions options;
fs::path entry;
std::map<std::string, std::string> originals;
std::string loader_state;

void read_every_sample(const data::TokenizedDataset& ds) {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss;
  for (int64_t i = 0; i < ds.size(); ++i) {
    ds.get(i, tokens, loss);
    if (tokens.size() != loss.size()) __builtin_trap();
  }
}

std::unique_ptr<data::DataLoader> make_loader(const std::shared_ptr<const data::TokenizedDataset>& ds, bool packing) {
  return std::make_unique<data::DataLoader>(ds, /*micro_batch_size=*/2, /*seq_len=*/32, packing, /*pad_id=*/0,
                                            /*seed=*/1, /*rank=*/0, /*world=*/1, /*prefetch=*/1, at::Device(at::kCPU));
}

}  // namespace

void target_setup() {
  at::set_num_threads(1);
  tokenizer = tok::Tokenizer::load(small_tokenizer_model());
  const auto dir = scratch() / "data";
  fs::create_directories(dir);
  std::string lines;
  for (int i = 0; i < 20; ++i) {
    lines += nlohmann::json{{"prompt", "Count to " + std::to_string(i)}, {"completion", " the quick brown fox"}}.dump();
    lines += "\n";
  }
  write_bytes(dir / "train.jsonl", lines);
  options.sources = {{(dir / "train.jsonl").string(), SourceFormat::kPromptCompletion, 1.0}};
  options.cache_dir = dir / "cache";
  options.seq_len = 32;
  const auto ds = data::TokenizedDataset::build(options, *tokenizer);
  for (const auto& e : fs::directory_iterator(options.cache_dir)) {
    if (e.is_directory()) entry = e.path();
  }
  for (const char* name : kEntryFiles) originals[name] = read_bytes(entry / name);
  auto loader = make_loader(ds, false);
  loader->next();
  loader_state = loader->state_dict().dump();
}

std::vector<std::string> seeds() {
  std::vector<std::string> out;
  for (uint8_t mode = 0; mode < 4; ++mode) out.push_back(with_mode(mode, originals[kEntryFiles[mode]]));
  out.push_back(with_mode(4, loader_state));
  return out;
}

}  // namespace ft::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ft;
  const auto input = fuzz::split_mode(data, size);
  const int mode = input.mode % 5;
  if (mode < 4) {
    const std::string name = fuzz::kEntryFiles[mode];
    fuzz::write_bytes(fuzz::entry / name, input.payload);
    fuzz::accepted([&] { fuzz::read_every_sample(*data::TokenizedDataset::build(fuzz::options, *fuzz::tokenizer)); });
    for (const auto& [file, bytes] : fuzz::originals) fuzz::write_bytes(fuzz::entry / file, bytes);
    return 0;
  }
  const auto state = nlohmann::json::parse(input.payload, nullptr, /*allow_exceptions=*/false);
  if (state.is_discarded()) return 0;
  fuzz::accepted([&] {
    auto loader = fuzz::make_loader(data::TokenizedDataset::build(fuzz::options, *fuzz::tokenizer), input.mode & 8);
    loader->load_state_dict(state);
    for (int i = 0; i < 3 && loader->next(); ++i) {
    }
  });
  return 0;
}
