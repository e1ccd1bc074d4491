#include "io/safetensors.h"

#include "util/file_writer.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "util/error.h"

namespace ft::io {
namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's MAX_HEADER_SIZE

const std::vector<std::pair<std::string, at::ScalarType>>& dtype_table() {
  static const std::vector<std::pair<std::string, at::ScalarType>> table = {
      {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16}, {"F64", at::kDouble}, {"I64", at::kLong},
      {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},       {"U8", at::kByte},    {"BOOL", at::kBool}};
  return table;
}

std::string where(const std::filesystem::path& path, const std::string& tensor) {
  return path.string() + (tensor.empty() ? "" : ", tensor '" + tensor + "'");
}

// Bad input (exit code 2, as for other files of a model directory): names the file and the tensor.
ConfigError corrupt(const std::filesystem::path& path, const std::string& tensor, const std::string& what) {
  return ConfigError("invalid safetensors file " + where(path, tensor) + ": " + what,
                     "the file is truncated or corrupt; re-download or re-save it");
}

}  // namespace

at::ScalarType dtype_from_safetensors(const std::string& name, const std::string& context) {
  for (const auto& [key, type] : dtype_table()) {
    if (key == name) return type;
  }
  throw ConfigError("unsupported safetensors dtype '" + name + "' in " + context,
                    "supported: F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL");
}

std::string dtype_to_safetensors(at::ScalarType type) {
  for (const auto& [key, t] : dtype_table()) {
    if (t == type) return key;
  }
  throw Error(std::string("cannot store dtype ") + c10::toString(type) + " in safetensors");
}

namespace {

// The 8-byte length in front of the header, checked before anything is read past it: a damaged length must not
// send the JSON parser outside the file or into gigabytes of text.
std::uint64_t header_length(const MappedFile& file, const std::filesystem::path& path) {
  const std::size_t size = file.size();
  if (size < 8)
    throw corrupt(path, "", "file has " + std::to_string(size) + " bytes, fewer than the 8-byte header length");
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, file.data(), 8);  // little-endian on every supported host
  if (header_len > kMaxHeaderBytes) {
    throw corrupt(path, "",
                  "header length " + std::to_string(header_len) + " exceeds the limit of " +
                      std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (header_len > size - 8) {
    throw corrupt(path, "",
                  "header length " + std::to_string(header_len) + " exceeds the file size " + std::to_string(size));
  }
  return header_len;
}

// The JSON header in [begin, end), an object. A name given twice is refused: the parsed object would silently keep
// only the last of them.
nlohmann::json parse_header(const std::uint8_t* begin, const std::uint8_t* end, const std::filesystem::path& path) {
  std::set<std::string> keys;
  std::string duplicate;
  const nlohmann::json::parser_callback_t on_event = [&](int depth, nlohmann::json::parse_event_t event,
                                                         nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string() &&
        !keys.insert(parsed.get<std::string>()).second && duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(begin, end, on_event);
  } catch (const nlohmann::json::exception& e) {
    throw corrupt(path, "", std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) throw corrupt(path, "", "header is not a JSON object");
  if (!duplicate.empty()) throw corrupt(path, duplicate, "the header lists this name twice");
  return header;
}

Metadata parse_metadata(const nlohmann::json& entry, const std::filesystem::path& path) {
  if (!entry.is_object()) throw corrupt(path, "", "__metadata__ is not an object");
  Metadata metadata;
  for (const auto& [k, v] : entry.items()) {
    if (!v.is_string()) throw corrupt(path, "", "__metadata__ value for '" + k + "' is not a string");
    metadata[k] = v.get<std::string>();
  }
  return metadata;
}

// The element count of `shape` (its dimensions appended to `dims`), such that numel x element size fits int64
// (tensor sizes and byte counts are int64 in LibTorch), whatever the order of the dimensions: a zero dimension does
// not excuse another one that overflows on its own.
std::uint64_t checked_numel(const nlohmann::json& shape, std::uint64_t element_size, std::vector<int64_t>& dims,
                            const std::filesystem::path& path, const std::string& name) {
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<int64_t>::max());
  std::uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : shape) {
    if (!d.is_number_unsigned()) throw corrupt(path, name, "shape has a negative or non-integer dimension");
    const auto dim = d.get<std::uint64_t>();
    if (dim > kMax / element_size) {
      overflow = true;
    } else if (dim != 0 && numel > kMax / element_size / dim) {
      overflow = true;
    }
    numel = overflow ? 0 : numel * dim;
    dims.push_back(dim > kMax ? -1 : static_cast<int64_t>(dim));
    if (overflow) break;
  }
  if (overflow) {
    throw corrupt(path, name,
                  "shape " + shape.dump() + " x " + std::to_string(element_size) +
                      "-byte elements overflows a 64-bit byte count");
  }
  return numel;
}

// info.begin/end from data_offsets: inside the data section and exactly `expected` bytes long.
void read_offsets(const nlohmann::json& offs, std::uint64_t expected, std::uint64_t data_size, TensorInfo& info,
                  const std::filesystem::path& path, const std::string& name) {
  if (!offs.at(0).is_number_unsigned() || !offs.at(1).is_number_unsigned()) {
    throw corrupt(path, name, "data_offsets are not non-negative integers");
  }
  info.begin = offs.at(0).get<std::uint64_t>();
  info.end = offs.at(1).get<std::uint64_t>();
  if (info.end < info.begin) {
    throw corrupt(
        path, name,
        "data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) + "] end before they begin");
  }
  if (info.end > data_size) {
    throw corrupt(path, name,
                  "data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                      ") run past the end of the data (" + std::to_string(data_size) + " bytes)");
  }
  if (info.end - info.begin != expected) {
    throw corrupt(path, name,
                  "shape x dtype needs " + std::to_string(expected) + " bytes but data_offsets span " +
                      std::to_string(info.end - info.begin));
  }
}

// One tensor's header entry, checked on its own; how the tensors share the data section is check_tiling()'s.
TensorInfo tensor_entry(const nlohmann::json& entry, const std::string& name, std::uint64_t data_size,
                        const std::filesystem::path& path) {
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets") ||
      !entry.at("dtype").is_string() || !entry.at("shape").is_array() || !entry.at("data_offsets").is_array() ||
      entry.at("data_offsets").size() != 2) {
    throw corrupt(path, name, "entry needs dtype (string), shape (array) and data_offsets ([begin, end])");
  }
  TensorInfo info;
  info.dtype = dtype_from_safetensors(entry.at("dtype").get<std::string>(), where(path, name));
  const std::uint64_t element_size = c10::elementSize(info.dtype);
  const std::uint64_t numel = checked_numel(entry.at("shape"), element_size, info.shape, path, name);
  read_offsets(entry.at("data_offsets"), numel * element_size, data_size, info, path, name);
  return info;
}

using Extents = std::vector<std::pair<std::pair<std::uint64_t, std::uint64_t>, std::string>>;  // {{begin, end}, name}

// As the reference implementation requires: sorted by offsets, the tensors tile the data section exactly, with no
// overlap, no gap and nothing after the last one.
void check_tiling(Extents by_offset, std::uint64_t data_size, const std::filesystem::path& path) {
  std::sort(by_offset.begin(), by_offset.end());
  std::uint64_t expected_begin = 0;
  std::string previous;
  for (const auto& [range, name] : by_offset) {
    if (range.first < expected_begin) {
      throw corrupt(path, name, "its bytes overlap tensor '" + previous + "'");
    }
    if (range.first > expected_begin) {
      throw corrupt(path, name,
                    "data_offsets begin at " + std::to_string(range.first) + " but the previous tensor " +
                        (previous.empty() ? std::string("(none)") : "'" + previous + "'") + " ends at " +
                        std::to_string(expected_begin) + " (a gap in the data)");
    }
    expected_begin = range.second;
    previous = name;
  }
  if (expected_begin != data_size) {
    throw corrupt(path, "",
                  "the tensors cover " + std::to_string(expected_begin) + " bytes of data but the file holds " +
                      std::to_string(data_size) + " after the header");
  }
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : file_(MappedFile::open(path)) {
  data_start_ = 8 + static_cast<std::size_t>(header_length(*file_, path));
  const std::uint64_t data_size = file_->size() - data_start_;
  const nlohmann::json header = parse_header(file_->data() + 8, file_->data() + data_start_, path);
  Extents by_offset;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      metadata_ = parse_metadata(entry, path);
      continue;
    }
    TensorInfo info = tensor_entry(entry, name, data_size, path);
    by_offset.push_back({{info.begin, info.end}, name});
    infos_.emplace(name, std::move(info));
  }
  check_tiling(std::move(by_offset), data_size, path);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : infos_) out.push_back(name);
  return out;
}

void SafetensorsFile::rename(const std::function<std::string(const std::string&)>& new_name) {
  std::map<std::string, TensorInfo> renamed;
  for (const auto& [name, info] : infos_) {
    const std::string to = new_name(name);
    if (!renamed.emplace(to, info).second) {
      throw ConfigError(path().string() + " holds tensor '" + to + "' twice, under two names (one is '" + name + "')",
                        "the file mixes two layouts of one model; keep one of them");
    }
  }
  infos_ = std::move(renamed);
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  if (it == infos_.end()) throw Error("no tensor '" + name + "' in " + path().string());
  return it->second;
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& meta = info(name);
  const auto options = at::TensorOptions().dtype(meta.dtype).device(at::kCPU);
  if (meta.end == meta.begin) return at::empty(meta.shape, options);
  std::uint8_t* ptr = file_->mutable_data() + data_start_ + meta.begin;
  auto keep_alive = file_;  // the deleter owns a reference to the mapping
  at::Tensor t = at::from_blob(
      ptr, meta.shape, [keep_alive](void*) mutable { keep_alive.reset(); }, options);
  if (reinterpret_cast<std::uintptr_t>(ptr) % c10::elementSize(meta.dtype) != 0) return t.clone();
  return t;
}

at::Tensor SafetensorsFile::read(const std::string& name, DeviceReader& reader) const {
  const TensorInfo& meta = info(name);
  return reader.read(*file_, data_start_ + meta.begin, meta.dtype, meta.shape);
}

TensorMap read_safetensors(const std::filesystem::path& path, Metadata* metadata) {
  SafetensorsFile file(path);
  TensorMap out;
  for (const auto& name : file.names()) out.emplace(name, file.tensor(name));
  if (metadata != nullptr) *metadata = file.metadata();
  return out;
}

FileDigest write_safetensors(const std::filesystem::path& path, const TensorMap& tensors, const Metadata& metadata) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = metadata.empty() ? Metadata{{"format", "pt"}} : metadata;
  std::vector<at::Tensor> cpu;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    FT_CHECK(t.defined(), "write_safetensors: tensor '" + name + "' is undefined");
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const auto bytes = static_cast<std::uint64_t>(c.numel()) * c.element_size();
    header[name] = {{"dtype", dtype_to_safetensors(c.scalar_type())},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    cpu.push_back(std::move(c));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  // Weights of 64 MB and more bypass the page cache (util/file_writer.h says why).
  FileWriter out(path, /*direct=*/offset >= (std::uint64_t{64} << 20));
  const std::uint64_t len = text.size();
  out.write(&len, 8);
  out.write(text);
  for (const auto& c : cpu) out.write(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
  return out.finish(/*sync=*/false);
}

}  // namespace ft::io
