#include "train/resume_inputs.h"

#include <algorithm>
#include <fstream>

#include "util/error.h"
#include "util/fmt.h"
#include "util/hash.h"

namespace ft::train {
namespace fs = std::filesystem;

std::string weight_files_sample(const fs::path& model_dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(model_dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  constexpr int kBlocks = 16;
  constexpr uintmax_t kBlockBytes = 4096;
  uint64_t digest = hash_string("weights");
  std::string block(kBlockBytes, '\0');
  for (const auto& file : files) {
    const uintmax_t size = fs::file_size(file);
    digest = hash_bytes(&size, sizeof(size), digest);
    std::ifstream in(file, std::ios::binary);
    const uintmax_t span = size > kBlockBytes ? size - kBlockBytes : 0;
    for (int i = 0; i < kBlocks && in; ++i) {
      in.seekg(static_cast<std::streamoff>(span * i / (kBlocks - 1)));
      in.read(block.data(), static_cast<std::streamsize>(std::min(kBlockBytes, size)));
      digest = hash_bytes(block.data(), static_cast<size_t>(in.gcount()), digest);
    }
    if (!in) throw Error("cannot read " + file.string(), "check the model directory's files and permissions");
  }
  return hex64(digest);
}

nlohmann::json resume_inputs(const Config& config, const std::vector<std::string>& train_content, bool with_base) {
  nlohmann::json inputs = {{"data.train", train_content}};
  if (with_base) inputs["model.path"] = weight_files_sample(config.model.path);
  return inputs;
}

std::vector<std::string> resume_input_changes(const nlohmann::json& saved, const nlohmann::json& current,
                                              const Config& config) {
  std::vector<std::string> changes;
  if (!saved.is_object()) return changes;
  const auto saved_data = saved.value("data.train", nlohmann::json::array());
  const auto& data = current.at("data.train");
  if (saved_data.is_array() && saved_data.size() == data.size()) {
    for (size_t i = 0; i < data.size(); ++i) {
      if (!saved_data[i].is_string() || saved_data[i].get<std::string>().empty() || data[i].get<std::string>().empty())
        continue;
      if (saved_data[i] != data[i]) {
        changes.push_back(fmt::format(
            "data.train[{}] ({}) is not what the checkpoint's run read: its content (over 256 MB: its modification "
            "time) or how it is tokenized changed since; the resumed run continues its position in the data over the "
            "new samples",
            i, config.data.train[i].path));
      }
    }
  }
  if (saved.contains("model.path") && current.contains("model.path") && saved["model.path"] != current["model.path"]) {
    changes.push_back(fmt::format(
        "model.path ({}) holds other weights than those the checkpoint's adapters were trained on (a sample of the "
        "weight files differs): the adapters continue on this base (as meant only if it is the same model saved "
        "again)",
        config.model.path));
  }
  return changes;
}

}  // namespace ft::train
