// Helpers shared by the test suites: paths from the environment, temporary directories, running commands.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace ft::test {

// The finetune binary under test ($FT_BINARY).
std::string binary();
// The source tree ($FT_SOURCE_DIR).
std::filesystem::path source_dir();
// The Python with the reference packages ($FT_PYTHON, the project's .venv).
std::string python();

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "ft-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

struct CommandResult {
  int exit_code = -1;  // the process's exit status, or 128 + signal
  std::string output;  // stdout and stderr together
};

// Runs `command` through /bin/sh and captures its output.
CommandResult run(const std::string& command);
// Runs the finetune binary with `args` (already shell-quoted where needed).
CommandResult run_finetune(const std::string& args);

// The directory `make(dir)` fills, made once per `key` (the text its contents depend on: a script and its
// interpreter, say) as NAME-<hash of key> under the temp directory and published by an atomic rename. CTest runs
// every test in a process of its own, so the tests of a run share one slow reference this way instead of remaking it
// each. Throws std::runtime_error with the command's output when `make` fails.
std::filesystem::path made_once(const std::string& name, const std::string& key,
                                const std::function<CommandResult(const std::filesystem::path&)>& make);
// Writes `text` to `path`, creating parent directories.
void write_file(const std::filesystem::path& path, const std::string& text);
std::string read_file(const std::filesystem::path& path);
// Quotes `s` for /bin/sh.
std::string shell_quote(const std::string& s);
// A TCP port on 127.0.0.1 that was free a moment ago (for a rendezvous store).
int free_port();
// True when a CUDA GPU is visible to LibTorch.
bool has_cuda();

}  // namespace ft::test
