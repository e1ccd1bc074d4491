// TensorBoard scalar event files without TensorFlow or protobuf: TFRecord framing (length, masked CRC32C of
// the length, payload, masked CRC32C of the payload) around hand-encoded tensorflow.Event messages.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace ft::metrics {

// Wire encodings, exposed for tests.
// tensorflow.Event{wall_time = 1 (double), step = 2 (int64), file_version = 3 (string)}.
std::string encode_file_version_event(double wall_time, const std::string& version);
// tensorflow.Event{wall_time, step, summary = 5 {value = 1 {tag = 1 (string), simple_value = 2 (float)}}}.
std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag, float value);
// One TFRecord: u64 length (little endian), u32 masked crc32c(length), payload, u32 masked crc32c(payload).
std::string tfrecord(const std::string& payload);

class TensorBoardWriter {
 public:
  // Creates `log_dir` and events.out.tfevents.<unix time>.<hostname> in it, starting with the file_version
  // event ("brain.Event:2"). Throws ft::Error when the file cannot be created.
  explicit TensorBoardWriter(const std::filesystem::path& log_dir);

  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);
  void flush();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace ft::metrics
