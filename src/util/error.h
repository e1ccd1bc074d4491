// Exceptions that carry context and a hint; caught once at the CLI boundary (apps/finetune_main.cpp).
#pragma once

#include <stdexcept>
#include <string>

namespace ft {

// Documented process exit codes (README "Exit codes").
enum class ExitCode : int {
  kOk = 0,            // success
  kFailure = 1,       // any other failure (I/O, numerics, distributed peer lost, ...)
  kUsage = 2,         // bad command line or configuration
  kInterrupted = 130  // stopped by SIGINT/SIGTERM after writing a checkpoint
};

// An error a user can act on: what went wrong (with file/key context) and what to do about it.
class Error : public std::runtime_error {
 public:
  explicit Error(std::string message, std::string hint = {}, ExitCode code = ExitCode::kFailure)
      : std::runtime_error(std::move(message)), hint_(std::move(hint)), code_(code) {}

  const std::string& hint() const noexcept { return hint_; }
  ExitCode code() const noexcept { return code_; }

 private:
  std::string hint_;
  ExitCode code_;
};

// Bad configuration or command line: exit code 2.
class ConfigError : public Error {
 public:
  explicit ConfigError(std::string message, std::string hint = {})
      : Error(std::move(message), std::move(hint), ExitCode::kUsage) {}
};

// The first line of e's message (a c10::Error's without its backtrace): what a log line or an outer error quotes.
std::string first_line(const std::exception& e);

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* condition, const std::string& message);
}  // namespace detail

}  // namespace ft

// FT_CHECK(cond, message): internal invariant or input check that throws ft::Error with file and line.
#define FT_CHECK(cond, message)                                                \
  do {                                                                         \
    if (!(cond)) ::ft::detail::check_failed(__FILE__, __LINE__, #cond, (message)); \
  } while (false)
