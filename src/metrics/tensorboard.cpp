#include "metrics/tensorboard.h"

#include <unistd.h>

#include <chrono>
#include <cstring>

#include "util/checksum.h"
#include "util/error.h"

namespace ft::metrics {
namespace {

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_tag(std::string& out, int field, int wire_type) { put_varint(out, static_cast<uint64_t>(field << 3 | wire_type)); }

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, int field, double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  put_tag(out, field, 1);
  put_le(out, bits, 8);
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_double(e, 1, wall_time);
  put_tag(e, 2, 0);
  put_varint(e, static_cast<uint64_t>(step));  // int64 varint: two's complement for negatives, as protobuf does
  return e;
}

}  // namespace

std::string encode_file_version_event(double wall_time, const std::string& version) {
  std::string e;
  put_double(e, 1, wall_time);
  put_bytes(e, 3, version);
  return e;
}

std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string v;
  put_bytes(v, 1, tag);
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  put_tag(v, 2, 5);
  put_le(v, bits, 4);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

std::string tfrecord(const std::string& payload) {
  std::string header;
  put_le(header, payload.size(), 8);
  std::string out = header;
  put_le(out, masked_crc32c(header.data(), header.size()), 4);
  out += payload;
  put_le(out, masked_crc32c(payload.data(), payload.size()), 4);
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& log_dir) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  char host[256] = "localhost";
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  host[sizeof host - 1] = '\0';
  const auto now = std::chrono::system_clock::now();
  const double wall = std::chrono::duration<double>(now.time_since_epoch()).count();
  path_ = log_dir / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(wall)) + "." + host);
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_)
    throw Error("cannot create TensorBoard event file '" + path_.string() + "'",
                "check that the run directory is writable, or set logging.tensorboard: false");
  out_ << tfrecord(encode_file_version_event(wall, "brain.Event:2"));
  flush();
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  out_ << tfrecord(encode_scalar_event(wall_time, step, tag, static_cast<float>(value)));
}

void TensorBoardWriter::flush() {
  out_.flush();
  if (!out_) throw Error("write error on TensorBoard event file '" + path_.string() + "'", "check free disk space");
}

}  // namespace ft::metrics
