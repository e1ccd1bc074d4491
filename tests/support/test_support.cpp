#include "support/test_support.h"
#include "util/error.h"
#include "util/fs.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace ft::test {
namespace {

// The environment variable `name` when set, else the path CMake compiled in.
std::string env_or(const char* name, const char* built_in) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : built_in;
}

}  // namespace

std::string binary() {
  return env_or("FT_BINARY", FT_TEST_BINARY);
}
std::filesystem::path source_dir() {
  return env_or("FT_SOURCE_DIR", FT_TEST_SOURCE_DIR);
}
std::string python() {
  return env_or("FT_PYTHON", FT_TEST_PYTHON);
}

TempDir::TempDir(const std::string& prefix) {
  std::random_device rd;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto candidate = std::filesystem::temp_directory_path() /
                     (prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(rd() % 1000000));
    if (std::filesystem::create_directory(candidate)) {
      path_ = candidate;
      return;
    }
  }
  throw std::runtime_error("cannot create a temporary directory");
}

TempDir::~TempDir() {
  try {
    remove_tree(path_);
  } catch (const Error& e) {
    ADD_FAILURE() << "temporary directory left behind: " << e.what();
  }
}

CommandResult run(const std::string& command) {
  CommandResult result;
  const std::string full = command + " 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed for: " + command);
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_code = 128 + WTERMSIG(status);
  }
  return result;
}

CommandResult run_finetune(const std::string& args) {
  return run(shell_quote(binary()) + " " + args);
}

std::filesystem::path made_once(const std::string& name, const std::string& key,
                                const std::function<CommandResult(const std::filesystem::path&)>& make) {
  const auto final_dir =
      std::filesystem::temp_directory_path() / (name + "-" + std::to_string(std::hash<std::string>{}(key)));
  if (std::filesystem::exists(final_dir)) return final_dir;
  const std::filesystem::path staging = final_dir.string() + "-" + std::to_string(::getpid());
  const CommandResult made = make(staging);
  if (made.exit_code != 0) {
    ft::remove_tree(staging);
    throw std::runtime_error(name + ": making the shared reference failed:\n" + made.output);
  }
  std::error_code ec;
  std::filesystem::rename(staging, final_dir, ec);  // loses harmlessly to a concurrent maker
  ft::remove_tree(staging);
  return final_dir;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

bool has_cuda() {
  return at::hasCUDA();
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("cannot find a free TCP port on 127.0.0.1");
  return ntohs(addr.sin_port);
}

}  // namespace ft::test
