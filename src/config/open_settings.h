// Settings that are a keyword or a free value (a path, a GPU index), beside settings.h's closed sets: parsed once
// when the config is bound, printed back as the text they were given. Header-only.
#pragma once

#include <optional>
#include <string>
#include <type_traits>

namespace ft {

// checkpoint.resume: auto (the newest valid checkpoint of the run directory), never, or a checkpoint directory.
struct ResumeSetting {
  enum class Mode { kAuto, kNever, kPath };
  Mode mode = Mode::kAuto;
  std::string path;  // the checkpoint directory when mode == kPath

  static constexpr const char* kExpected = "auto, never or a checkpoint path";
  static std::optional<ResumeSetting> parse(const std::string& text) {
    if (text == "auto") return ResumeSetting{Mode::kAuto, ""};
    if (text == "never") return ResumeSetting{Mode::kNever, ""};
    if (text.empty()) return std::nullopt;
    return ResumeSetting{Mode::kPath, text};
  }
  std::string str() const { return mode == Mode::kAuto ? "auto" : mode == Mode::kNever ? "never" : path; }
};

// run.device: auto (this process's GPU when one is visible, else the CPU), cpu, cuda (this process's GPU: the local
// rank's) or cuda:N.
struct DeviceSetting {
  enum class Kind { kAuto, kCpu, kCuda };
  Kind kind = Kind::kAuto;
  int index = -1;  // N of cuda:N; -1: the local rank's GPU

  static constexpr const char* kExpected = "one of: auto, cpu, cuda, cuda:N";
  static std::optional<DeviceSetting> parse(const std::string& text) {
    if (text == "auto") return DeviceSetting{Kind::kAuto, -1};
    if (text == "cpu") return DeviceSetting{Kind::kCpu, -1};
    if (text == "cuda") return DeviceSetting{Kind::kCuda, -1};
    const std::string digits = text.rfind("cuda:", 0) == 0 ? text.substr(5) : "";
    if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    return DeviceSetting{Kind::kCuda, std::stoi(digits)};
  }
  std::string str() const {
    if (kind == Kind::kAuto) return "auto";
    if (kind == Kind::kCpu) return "cpu";
    return index < 0 ? "cuda" : "cuda:" + std::to_string(index);
  }
};

template <class T>
inline constexpr bool is_open_setting_v = std::is_same_v<T, ResumeSetting> || std::is_same_v<T, DeviceSetting>;

}  // namespace ft
