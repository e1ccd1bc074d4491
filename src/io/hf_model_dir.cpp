// Hugging Face checkpoint directories: one safetensors file, or shards with an index.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "io/safe_path.h"
#include "io/safetensors.h"
#include "util/error.h"
#include "util/file_writer.h"
#include "util/fmt.h"

namespace ft::io {
namespace {

// What to do about a model directory without safetensors: one with PyTorch pickles gets the one-line conversion.
std::string missing_safetensors_hint(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const char* pickle : {"pytorch_model.bin", "pytorch_model.bin.index.json"}) {
    if (!std::filesystem::exists(dir / pickle, ec)) continue;
    return fmt::format(
        "{0} holds PyTorch pickle weights ({1}), which finetune does not read (loading a pickle can run code); "
        "convert the model and its tokenizer once: python -c \"from transformers import AutoModelForCausalLM as M, "
        "AutoTokenizer as T; d = '{0}'; [c.from_pretrained(d).save_pretrained(d + '-safetensors') for c in (M, T)]\"",
        dir.string(), pickle);
  }
  return "point at a Hugging Face model directory saved with safetensors";
}

}  // namespace

CheckpointReader::CheckpointReader(const std::filesystem::path& dir, const std::string& base_name) {
  const auto single = dir / (base_name + ".safetensors");
  const auto index = dir / (base_name + ".safetensors.index.json");
  const auto roots = model_dir_roots(dir);
  if (std::filesystem::exists(index)) {
    require_inside_model_dir(index, dir);
    // An index lists names and file names (about 100 KB for a 400B model): a huge one is not an index.
    constexpr std::uintmax_t kMaxIndexBytes = 100'000'000;
    std::error_code size_ec;
    const auto index_size = std::filesystem::file_size(index, size_ec);
    if (!size_ec && index_size > kMaxIndexBytes) {
      throw ConfigError(index.string() + " has " + std::to_string(index_size) + " bytes, more than the limit of " +
                            std::to_string(kMaxIndexBytes) + " for an index",
                        "re-download or re-save the checkpoint");
    }
    // JSON objects keep only the last of duplicate keys: a tensor listed twice in weight_map (two shards claiming
    // it) is refused rather than silently resolved.
    std::string top_key, duplicate;
    std::set<std::string> tensors;  // weight_map's keys seen so far
    const nlohmann::json::parser_callback_t on_event = [&](int depth, nlohmann::json::parse_event_t event,
                                                           nlohmann::json& parsed) {
      if (event == nlohmann::json::parse_event_t::key && parsed.is_string()) {
        if (depth == 1) top_key = parsed.get<std::string>();
        if (depth == 2 && top_key == "weight_map" && !tensors.insert(parsed.get<std::string>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
      }
      return true;
    };
    nlohmann::json j;
    try {
      std::ifstream in(index);
      j = nlohmann::json::parse(in, on_event);
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError("cannot parse " + index.string() + ": " + e.what(), "re-download or re-save the checkpoint");
    }
    if (!duplicate.empty()) {
      throw ConfigError(index.string() + ": weight_map lists tensor '" + duplicate + "' twice",
                        "the index is damaged or hand-edited; re-download or re-save the checkpoint");
    }
    if (!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object()) {
      throw ConfigError(index.string() + " has no \"weight_map\" object", "re-save the checkpoint");
    }
    // Every shard name is checked before any shard is opened.
    std::map<std::string, std::filesystem::path> shard_paths;
    for (const auto& [name, file] : j.at("weight_map").items()) {
      if (!file.is_string()) {
        throw ConfigError(index.string() + ": weight_map entry '" + name + "' is not a file name",
                          "re-save the checkpoint");
      }
      const auto fname = file.get<std::string>();
      if (shard_paths.count(fname) == 0) {
        shard_paths.emplace(fname, resolve_inside(dir, fname, index, "weight_map entry '" + name + "'",
                                                  /*allow_subdirs=*/false, roots));
      }
    }
    std::map<std::string, std::size_t> file_index;
    for (const auto& [name, file] : j.at("weight_map").items()) {
      const auto fname = file.get<std::string>();
      auto it = file_index.find(fname);
      if (it == file_index.end()) {
        files_.push_back(std::make_unique<SafetensorsFile>(shard_paths.at(fname)));
        it = file_index.emplace(fname, files_.size() - 1).first;
      }
      if (!files_[it->second]->contains(name)) {
        throw ConfigError(index.string() + " lists tensor '" + name + "' in " + fname + ", but that shard lacks it",
                          "the index and shards disagree; re-save the checkpoint");
      }
      where_[name] = {it->second, name};
    }
  } else if (std::filesystem::exists(single)) {
    require_inside_model_dir(single, dir);
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const auto& name : files_[0]->names()) where_[name] = {0, name};
  } else {
    throw ConfigError("no " + single.filename().string() + " or " + index.filename().string() + " in " + dir.string(),
                      missing_safetensors_hint(dir));
  }
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : where_) out.push_back(name);
  return out;
}

const CheckpointReader::Location& CheckpointReader::locate(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error("checkpoint has no tensor '" + name + "'");
  return it->second;
}

const TensorInfo& CheckpointReader::info(const std::string& name) const {
  const Location& at = locate(name);
  return files_[at.file]->info(at.stored);
}

at::Tensor CheckpointReader::tensor(const std::string& name) const {
  const Location& at = locate(name);
  return files_[at.file]->tensor(at.stored);
}

at::Tensor CheckpointReader::read(const std::string& name, DeviceReader& reader) const {
  const Location& at = locate(name);
  return files_[at.file]->read(at.stored, reader);
}

std::string CheckpointReader::file_of(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? std::string("<none>") : files_[it->second.file]->path().string();
}

void CheckpointReader::rename(const std::function<std::string(const std::string&)>& new_name) {
  std::map<std::string, Location> renamed;
  for (auto& [name, at] : where_) {
    const std::string to = new_name(name);
    if (!renamed.emplace(to, at).second) {
      throw ConfigError("the checkpoint holds tensor '" + to + "' twice, under two names (one is '" + name + "')",
                        "the weights mix two layouts of one model; re-save the checkpoint");
    }
  }
  where_ = std::move(renamed);
}

FileDigests write_checkpoint(const std::filesystem::path& dir,
                             const std::vector<std::pair<std::string, at::Tensor>>& order, int64_t shard_size_bytes,
                             const std::string& base_name) {
  std::filesystem::create_directories(dir);
  std::vector<TensorMap> shards(1);
  std::vector<int64_t> shard_bytes(1, 0);
  int64_t total = 0;
  std::set<std::string> seen;
  for (const auto& [name, t] : order) {
    FT_CHECK(seen.insert(name).second, "write_checkpoint: duplicate tensor name '" + name + "'");
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    if (shard_size_bytes > 0 && shard_bytes.back() > 0 && shard_bytes.back() + bytes > shard_size_bytes) {
      shards.emplace_back();
      shard_bytes.push_back(0);
    }
    shards.back().emplace(name, t);
    shard_bytes.back() += bytes;
    total += bytes;
  }
  // Remove a stale layout of the other kind so a reader never sees both.
  std::filesystem::remove(dir / (base_name + ".safetensors.index.json"));
  FileDigests digests;
  if (shards.size() == 1) {
    const auto path = dir / (base_name + ".safetensors");
    digests.emplace(path, write_safetensors(path, shards[0]));
    return digests;
  }
  std::filesystem::remove(dir / (base_name + ".safetensors"));
  nlohmann::json weight_map = nlohmann::json::object();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    char fname[128];
    std::snprintf(fname, sizeof(fname), "%s-%05zu-of-%05zu.safetensors", base_name.c_str(), i + 1, shards.size());
    digests.emplace(dir / fname, write_safetensors(dir / fname, shards[i]));
    for (const auto& [name, _] : shards[i]) weight_map[name] = fname;
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file(dir / (base_name + ".safetensors.index.json"), index.dump(2) + "\n");
  return digests;
}

}  // namespace ft::io
