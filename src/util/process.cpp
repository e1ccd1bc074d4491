#include "util/process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cerrno>
#include <cstring>

#include "util/error.h"

extern char** environ;

namespace ft::process {
namespace {

const std::chrono::steady_clock::time_point g_process_start = std::chrono::steady_clock::now();

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

bool blank(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

}  // namespace

std::vector<std::string> environment(const std::map<std::string, std::string>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (set.count(entry.substr(0, entry.find('='))) == 0) env.push_back(entry);
  }
  for (const auto& [key, value] : set) env.push_back(key + "=" + value);
  return env;
}

pid_t spawn(const std::string& executable, const std::vector<std::string>& argv, const std::vector<std::string>& env,
            int stdout_fd, int stderr_fd) {
  std::vector<std::string> argv_copy = argv, env_copy = env;
  auto c_argv = c_strings(argv_copy);
  auto c_env = c_strings(env_copy);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("cannot start a child process: fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // Child: async-signal-safe calls only until exec.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    if (stdout_fd >= 0) ::dup2(stdout_fd, 1);
    if (stderr_fd >= 0) ::dup2(stderr_fd, 2);
    ::execve(executable.c_str(), c_argv.data(), c_env.data());
    const char msg[] = "finetune: exec failed\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  return pid;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
  }
  return "ended with status " + std::to_string(status);
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

bool failed(int status) {
  return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

bool mentions_error(const std::string& line) {
  std::string lower(line);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("error") != std::string::npos || lower.find("terminate called") != std::string::npos;
}

std::string last_error_line(const std::string& text) {
  std::string last_line, last_error;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    start = end + 1;
    // A progress bar redrawn with \r leaves its last state after the final \r.
    if (const size_t cr = line.rfind('\r'); cr != std::string::npos) line.erase(0, cr + 1);
    if (blank(line)) continue;
    last_line = line;
    if (mentions_error(line)) last_error = line;
  }
  return last_error.empty() ? last_line : last_error;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the descriptor is gone: nothing sensible left to do with the text
    done += static_cast<size_t>(n);
  }
}

double seconds_since_start() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_process_start).count();
}

}  // namespace ft::process
