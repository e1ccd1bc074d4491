// The safetensors format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the raw data.
// The reader memory-maps the file and validates every entry before any tensor is touched; tensors alias the mapping
// (copy-on-write, the mapping lives as long as any tensor does). No pickle anywhere.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "util/checksum.h"

#include "io/device_read.h"
#include "io/mapped_file.h"

namespace ft::io {

using TensorMap = std::map<std::string, at::Tensor>;  // sorted by name
using Metadata = std::map<std::string, std::string>;  // the header's "__metadata__"

// "F32" <-> at::kFloat etc. Supported: F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL.
at::ScalarType dtype_from_safetensors(const std::string& name, const std::string& context);
std::string dtype_to_safetensors(at::ScalarType type);

struct TensorInfo {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets relative to the start of the data section
  std::uint64_t end = 0;
};

// One opened, validated safetensors file.
class SafetensorsFile {
 public:
  // Throws ft::ConfigError (bad input, exit code 2) naming the file (and tensor) on: a file shorter than 8 bytes, a
  // header longer than the file or than 100,000,000 bytes, invalid JSON, a repeated name, an unknown dtype, a shape
  // whose byte count overflows int64, data_offsets that end before they begin, run past the end or differ from
  // shape x dtype, and tensors that do not tile the data section exactly (overlap, gap, bytes after the last one),
  // as the reference implementation requires. Nothing is allocated in proportion to what the header claims.
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_->path(); }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return infos_.count(name) > 0; }
  const TensorInfo& info(const std::string& name) const;
  const Metadata& metadata() const { return metadata_; }

  // A CPU tensor (the stored dtype and shape) that aliases the mapping; cloned when misaligned for its dtype.
  at::Tensor tensor(const std::string& name) const;
  // A new tensor (the stored dtype and shape) on `reader`'s device, read from the file rather than the mapping.
  at::Tensor read(const std::string& name, DeviceReader& reader) const;
  // Names every tensor new_name(its current name) from now on, as CheckpointReader::rename (another layout of one
  // model: model/checkpoint_names.h); a name given twice is a ConfigError, and the names stay as they were.
  void rename(const std::function<std::string(const std::string&)>& new_name);

 private:
  std::shared_ptr<MappedFile> file_;
  std::size_t data_start_ = 0;  // 8 + header length
  std::map<std::string, TensorInfo> infos_;
  Metadata metadata_;
};

// Every tensor of `path` (see SafetensorsFile::tensor for lifetime).
TensorMap read_safetensors(const std::filesystem::path& path, Metadata* metadata = nullptr);

// Writes `tensors` (any device; copied to CPU contiguous) sorted by name, header padded with spaces to a multiple
// of 8 bytes as the Python library does. `metadata` defaults to {"format": "pt"}. Writes `path` directly; callers
// that need atomicity write to a temporary name and rename. Returns the file's digest (FileWriter::finish).
FileDigest write_safetensors(const std::filesystem::path& path, const TensorMap& tensors,
                             const Metadata& metadata = {});

// A Hugging Face checkpoint directory: model.safetensors, or shards listed by model.safetensors.index.json
// (`base_name` picks another prefix, e.g. "adapter_model"). Every shard must be a plain file name in `dir` and no
// file may resolve through a symlink outside it (io/safe_path.h; a hub cache snapshot may link into its repository's
// blobs/): otherwise ft::ConfigError naming the index and the entry, before any shard is opened.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::filesystem::path& dir, const std::string& base_name = "model");
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return where_.count(name) > 0; }
  const TensorInfo& info(const std::string& name) const;
  at::Tensor tensor(const std::string& name) const;
  at::Tensor read(const std::string& name, DeviceReader& reader) const;  // SafetensorsFile::read
  // Where `name` lives, for error messages.
  std::string file_of(const std::string& name) const;
  // Names every tensor new_name(its current name) from now on (one model's layouts that differ in prefixes:
  // model/checkpoint_names.h); a name given twice is a ConfigError.
  void rename(const std::function<std::string(const std::string&)>& new_name);

 private:
  struct Location {
    std::size_t file;    // index into files_
    std::string stored;  // the name in that file
  };
  const Location& locate(const std::string& name) const;

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Location> where_;  // tensor name -> where it is stored
};

// Writes `tensors` as <base>.safetensors, or, when their total exceeds `shard_size_bytes` (> 0), as
// <base>-0000N-of-0000M.safetensors plus <base>.safetensors.index.json. Tensors are placed in `order`. Returns the
// digests of the safetensors files.
FileDigests write_checkpoint(const std::filesystem::path& dir,
                             const std::vector<std::pair<std::string, at::Tensor>>& order, int64_t shard_size_bytes,
                             const std::string& base_name = "model");

}  // namespace ft::io
