#include "dist/launcher.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/cuda.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include "util/error.h"
#include "util/file_writer.h"
#include "util/fmt.h"
#include "util/process.h"
#include "util/signals.h"

extern char** environ;

namespace ft::dist {
namespace {

// One worker's output stream: splits it into lines, prefixes each and remembers the last error-looking line.
struct Stream {
  UniqueFd fd;
  int target = 1;  // our fd the prefixed lines go to
  std::string partial;
};

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream out, err;
  std::string last_line;   // last non-empty line, stderr preferred
  std::string last_error;  // last line mentioning an error
};

void emit_line(Worker& w, Stream& s, const std::string& line) {
  process::write_all(s.target, fmt::format("[rank {}] {}\n", w.rank, line));
  if (line.find_first_not_of(" \t\r") == std::string::npos) return;
  if (s.target == 2 || w.last_line.empty()) w.last_line = line;
  if (process::mentions_error(line)) w.last_error = line;
}

// Reads what is available; false at end of stream.
bool pump(Worker& w, Stream& s) {
  char buf[65536];
  const ssize_t n = ::read(s.fd.get(), buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!s.partial.empty()) emit_line(w, s, s.partial);
    s.partial.clear();
    s.fd.reset();
    return false;
  }
  s.partial.append(buf, static_cast<size_t>(n));
  size_t start = 0;
  for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    emit_line(w, s, s.partial.substr(start, nl - start));
  }
  s.partial.erase(0, start);
  return true;
}

std::vector<std::string> worker_environment(int rank, int nproc, const std::string& addr, int port,
                                            const std::string& run_id) {
  const std::map<std::string, std::string> ours = {
      {"RANK", std::to_string(rank)},          {"LOCAL_RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(nproc)},   {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
      {"GROUP_RANK", "0"},                     {"ROLE_RANK", std::to_string(rank)},
      {"MASTER_ADDR", addr},                   {"MASTER_PORT", std::to_string(port)},
      {"TORCHELASTIC_RUN_ID", run_id},         {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "0"},      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"FT_LAUNCHER", "1"}};
  std::vector<std::string> env;
  bool has_omp = false;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string key = entry.substr(0, entry.find('='));
    if (ours.count(key) != 0) continue;
    has_omp = has_omp || key == "OMP_NUM_THREADS";
    env.push_back(entry);
  }
  for (const auto& [key, value] : ours) env.push_back(key + "=" + value);
  // As torchrun does: N workers sharing the cores should not each start one OpenMP thread per core.
  if (!has_omp && nproc > 1) {
    const unsigned cores = std::max(1U, std::thread::hardware_concurrency());
    env.push_back("OMP_NUM_THREADS=" + std::to_string(std::max(1U, cores / static_cast<unsigned>(nproc))));
  }
  return env;
}

void start(Worker& w, const std::string& exe, const std::vector<std::string>& argv,
           const std::vector<std::string>& env) {
  int out_pipe[2], err_pipe[2];
  FT_CHECK(::pipe2(out_pipe, O_CLOEXEC) == 0 && ::pipe2(err_pipe, O_CLOEXEC) == 0,
           std::string("launcher: pipe failed: ") + std::strerror(errno));
  UniqueFd out_r(out_pipe[0]), out_w(out_pipe[1]), err_r(err_pipe[0]), err_w(err_pipe[1]);
  // Own process group, so a terminal's Ctrl-C reaches the workers once (forwarded by us), and death with the
  // launcher even if it is SIGKILLed.
  w.pid = process::spawn(exe, argv, env, out_w.get(), err_w.get());
  w.running = true;
  ::fcntl(out_r.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(err_r.get(), F_SETFL, O_NONBLOCK);
  w.out.fd = std::move(out_r);
  w.out.target = 1;
  w.err.fd = std::move(err_r);
  w.err.target = 2;
}

}  // namespace

int launch_local(int nproc, const std::vector<std::string>& args, const LaunchOptions& options) {
  if (nproc < 1) throw ConfigError(fmt::format("--nproc-per-node {} must be >= 1", nproc), "use a positive number or auto");
  c10d::TCPStoreOptions store_opts;
  store_opts.port = 0;  // the OS picks a free port: no race with other launchers
  store_opts.isServer = true;
  store_opts.waitWorkers = false;
  store_opts.multiTenant = true;
  auto store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_opts);
  const int port = store->getPort();
  const std::string run_id = fmt::format("ft-{}-{}", ::getpid(), port);

  signals::Catcher forwarding;  // SIGINT/SIGTERM are forwarded to the workers below
  std::vector<Worker> workers(static_cast<size_t>(nproc));
  for (int r = 0; r < nproc; ++r) {
    std::vector<std::string> argv{options.executable};
    argv.insert(argv.end(), args.begin(), args.end());
    workers[static_cast<size_t>(r)].rank = r;
    start(workers[static_cast<size_t>(r)], options.executable, std::move(argv),
          worker_environment(r, nproc, options.master_addr, port, run_id));
  }
  FT_LOG_INFO("launcher: {} workers, store {}:{}, run id {}", nproc, options.master_addr, port, run_id);

  int first_failed = -1;
  int forwarded = 0;
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  auto stop_others = [&](int sig) {
    for (auto& w : workers) if (w.running) ::kill(w.pid, sig);
  };
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, Stream*>> owners;
    for (auto& w : workers) {
      for (Stream* s : {&w.out, &w.err}) {
        if (s->fd.get() < 0) continue;
        fds.push_back({s->fd.get(), POLLIN, 0});
        owners.emplace_back(&w, s);
      }
    }
    const bool any_running = std::any_of(workers.begin(), workers.end(), [](const Worker& w) { return w.running; });
    if (!any_running && fds.empty()) break;
    ::poll(fds.data(), fds.size(), 100);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) pump(*owners[i].first, *owners[i].second);
    }
    if (const int sig = forwarding.take(); sig != 0) {
      forwarded = sig;
      stop_others(sig);
      if (!kill_at) kill_at = std::chrono::steady_clock::now() + options.grace;
    }
    for (auto& w : workers) {
      if (!w.running || ::waitpid(w.pid, &w.status, WNOHANG) != w.pid) continue;
      w.running = false;
      if (process::failed(w.status) && first_failed < 0 && forwarded == 0 && !kill_at) {
        first_failed = w.rank;
        stop_others(SIGTERM);
        kill_at = std::chrono::steady_clock::now() + options.grace;
      }
    }
    if (kill_at && std::chrono::steady_clock::now() > *kill_at) {
      stop_others(SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
    // Output of a grandchild that outlived its worker must not keep us here.
    if (!any_running && kill_at == std::chrono::steady_clock::time_point::max()) break;
  }

  if (first_failed >= 0) {
    const Worker& w = workers[static_cast<size_t>(first_failed)];
    const std::string& why = w.last_error.empty() ? w.last_line : w.last_error;
    process::write_all(2, fmt::format("finetune launcher: rank {} (pid {}) {}; stopped the other {} worker(s).\n"
                                      "finetune launcher: rank {}'s last error: {}\n",
                                      w.rank, w.pid, process::describe_status(w.status), nproc - 1, w.rank,
                                      why.empty() ? "(no output)" : why));
    if (WIFEXITED(w.status)) return WEXITSTATUS(w.status);
    return 1;
  }
  if (forwarded != 0) return 130;
  return 0;
}

int nproc_auto() {
  const int n = static_cast<int>(torch::cuda::device_count());
  return n > 0 ? n : 1;
}

int parse_nproc(const std::string& value) {
  if (value == "auto") return nproc_auto();
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || n < 1 || n > 4096) {
    throw ConfigError(fmt::format("--nproc-per-node '{}' is not a positive number or 'auto'", value),
                      "e.g. --nproc-per-node 2, or auto for one worker per visible GPU");
  }
  return static_cast<int>(n);
}

}  // namespace ft::dist
