// Hugging Face weights: a .safetensors file (mode 0: the payload is the file) and a sharded checkpoint's
// model.safetensors.index.json (mode 1: the payload is the index, beside two valid shards). Every tensor that opens
// is read whole, so an entry pointing outside the file is caught by ASan if the checks miss it.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "fuzz_support.h"
#include "io/safetensors.h"

namespace ft::fuzz {
namespace {

const std::filesystem::path& shards_dir() {
  static const std::filesystem::path dir = scratch() / "shards";
  return dir;
}

void read_all(const at::Tensor& t) {
  // Bytes, not values: arbitrary bytes are not valid booleans for ATen's arithmetic.
  const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
  volatile uint8_t sum = 0;
  for (size_t i = 0; i < t.nbytes(); ++i) sum = static_cast<uint8_t>(sum + bytes[i]);
}

std::string small_file() {
  const auto path = scratch() / "seed.safetensors";
  io::write_safetensors(path,
                        {{"a", at::arange(6, at::kFloat).reshape({2, 3})},
                         {"b.weight", at::ones({4}, at::kBFloat16)},
                         {"c", at::ones({2}, at::kBool)}},
                        {{"format", "pt"}, {"note", "seed"}});
  return read_bytes(path);
}

}  // namespace

void target_setup() {
  at::set_num_threads(1);
  std::filesystem::create_directories(shards_dir());
  io::write_safetensors(shards_dir() / "model-00001-of-00002.safetensors",
                        {{"x", at::arange(4, at::kFloat)}, {"y", at::zeros({2, 2}, at::kHalf)}});
  io::write_safetensors(shards_dir() / "model-00002-of-00002.safetensors", {{"z", at::ones({3}, at::kInt)}});
}

std::vector<std::string> seeds() {
  return {with_mode(0, small_file()), with_mode(0, std::string("\x10\0\0\0\0\0\0\0{\"__metadata__\":{}}", 24)),
          with_mode(1, R"({"metadata": {"total_size": 34}, "weight_map": {"x": "model-00001-of-00002.safetensors",
            "y": "model-00001-of-00002.safetensors", "z": "model-00002-of-00002.safetensors"}})")};
}

}  // namespace ft::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ft;
  const auto input = fuzz::split_mode(data, size);
  if (input.mode % 2 == 0) {
    const auto file = fuzz::scratch() / "input.safetensors";
    fuzz::write_bytes(file, input.payload);
    fuzz::accepted([&] {
      const io::SafetensorsFile f(file);
      for (const auto& name : f.names()) {
        f.info(name);
        fuzz::read_all(f.tensor(name));
      }
      f.metadata();
    });
    fuzz::accepted([&] {
      for (const auto& [name, tensor] : io::read_safetensors(file)) fuzz::read_all(tensor);
    });
  } else {
    const auto index = fuzz::shards_dir() / "model.safetensors.index.json";
    fuzz::write_bytes(index, input.payload);
    fuzz::accepted([&] {
      const io::CheckpointReader reader(fuzz::shards_dir());
      for (const auto& name : reader.names()) fuzz::read_all(reader.tensor(name));
    });
    std::filesystem::remove(index);
  }
  return 0;
}
