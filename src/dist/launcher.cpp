#include "dist/launcher.h"

#include <c10/util/Logging.h>
#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "util/error.h"
#include "util/file_writer.h"
#include "util/fmt.h"
#include "util/log.h"
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

// The environment of the worker of global rank `rank` (local rank `local` of `nproc` on node `node` of `nnodes`):
// torchrun's variables, with the same values as torchrun's static rendezvous gives them.
struct Placement {
  int nproc = 1, nnodes = 1, node = 0;
  std::string addr;
  int port = 0;
  std::string run_id;
};

std::vector<std::string> worker_environment(int local, const Placement& p) {
  const int rank = p.node * p.nproc + local;
  const int world = p.nnodes * p.nproc;
  const std::map<std::string, std::string> ours = {{"RANK", std::to_string(rank)},
                                                   {"LOCAL_RANK", std::to_string(local)},
                                                   {"WORLD_SIZE", std::to_string(world)},
                                                   {"LOCAL_WORLD_SIZE", std::to_string(p.nproc)},
                                                   {"GROUP_RANK", std::to_string(p.node)},
                                                   {"GROUP_WORLD_SIZE", std::to_string(p.nnodes)},
                                                   {"ROLE_RANK", std::to_string(rank)},
                                                   {"ROLE_WORLD_SIZE", std::to_string(world)},
                                                   {"MASTER_ADDR", p.addr},
                                                   {"MASTER_PORT", std::to_string(p.port)},
                                                   {"TORCHELASTIC_RUN_ID", p.run_id},
                                                   {"TORCHELASTIC_RESTART_COUNT", "0"},
                                                   {"TORCHELASTIC_MAX_RESTARTS", "0"},
                                                   {"TORCHELASTIC_USE_AGENT_STORE", "True"},
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
  if (!has_omp && p.nproc > 1) {
    const unsigned cores = std::max(1U, std::thread::hardware_concurrency());
    env.push_back("OMP_NUM_THREADS=" + std::to_string(std::max(1U, cores / static_cast<unsigned>(p.nproc))));
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

// ---- Several nodes: the launchers meet and watch each other through the store of node 0's launcher.

using Clock = std::chrono::steady_clock;
constexpr auto kBeatInterval = std::chrono::seconds(1);
// A launcher beats every second whatever its workers do: one silent this long is gone (killed, or its host hung).
constexpr auto kSilentGone = std::chrono::seconds(3);
const std::string kKeys = "ft_launcher/";

std::string text(const std::vector<uint8_t>& bytes) {
  return {bytes.begin(), bytes.end()};
}
std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

class NodeGroup {
 public:
  NodeGroup(const LaunchOptions& options, int nproc) : opts_(options), nproc_(nproc) {
    peers_.resize(static_cast<size_t>(opts_.nnodes));
    // This launcher reports store failures in its own words; c10d's messages (with a C++ backtrace) would repeat
    // them. Only this process: the workers log as they do.
    FLAGS_caffe2_log_level = std::max<int>(FLAGS_caffe2_log_level, 3);
    const bool host = opts_.node_rank == 0;
    c10d::TCPStoreOptions store_opts;
    store_opts.port = static_cast<std::uint16_t>(opts_.master_port);
    store_opts.isServer = host;
    store_opts.waitWorkers = false;
    store_opts.multiTenant = true;
    store_opts.timeout = opts_.timeout;
    try {
      store_ = c10::make_intrusive<c10d::TCPStore>(opts_.master_addr, store_opts);
    } catch (const std::exception& e) {
      if (host) {
        throw Error(fmt::format("launcher of node 0: cannot host the store on port {} and reach it at {}:{}: {}",
                                opts_.master_port, opts_.master_addr, opts_.master_port, first_line(e)),
                    "is the port in use (another run)? pick another --master-port, the same on every node; "
                    "--master-addr must be this host's address");
      }
      throw Error(
          fmt::format("launcher of node {}: cannot reach the store of node 0 at {}:{} within {} s: {}", opts_.node_rank,
                      opts_.master_addr, opts_.master_port, opts_.timeout.count(), first_line(e)),
          "start node 0's launcher too, with the same --master-addr and --master-port; check the address "
          "and that the port is open between the nodes");
    }
    try {
      join();
      monitor_store_ = store_->clone();
    } catch (const ConfigError&) {
      // Node 0 keeps the store up a moment, so that the node it disagrees with reads why and refuses too.
      if (host) std::this_thread::sleep_for(std::chrono::seconds(2));
      throw;
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(fmt::format("launcher of node {}: lost the store at {}:{} while the nodes joined: {}",
                              opts_.node_rank, opts_.master_addr, opts_.master_port, first_line(e)),
                  "see node 0's output: its launcher hosts the store");
    }
  }

  ~NodeGroup() { stop_monitor(); }
  NodeGroup(const NodeGroup&) = delete;
  NodeGroup& operator=(const NodeGroup&) = delete;

  const std::string& run_id() const { return run_id_; }

  // "node 1 (ranks 2-3)".
  std::string node_name(int node) const {
    const int first = node * nproc_;
    return nproc_ == 1 ? fmt::format("node {} (rank {})", node, first)
                       : fmt::format("node {} (ranks {}-{})", node, first, first + nproc_ - 1);
  }

  void start_monitor() {
    const auto now = Clock::now();
    for (auto& p : peers_) p.changed = now;
    thread_ = std::thread([this] { monitor_loop(); });
  }

  // Why this node should stop its workers, or "" while the other nodes are well.
  std::string problem() const {
    std::lock_guard<std::mutex> lock(mu_);
    return problem_;
  }

  // After a failure at `since`: waits (a few seconds at most) until each other node has beaten since then, ended,
  // or been silent for kSilentGone, then names the lost or failed ones.
  std::vector<std::string> lost_nodes(Clock::time_point since) {
    const auto deadline = Clock::now() + kSilentGone + kBeatInterval;
    for (;;) {
      bool settled = true;
      {
        std::lock_guard<std::mutex> lock(mu_);
        const auto now = Clock::now();
        for (int n = 0; n < opts_.nnodes && !store_lost_; ++n) {
          const Peer& p = peers_[static_cast<size_t>(n)];
          if (n == opts_.node_rank || p.exit_code || p.changed > since || now - p.changed >= kSilentGone) continue;
          settled = false;
        }
      }
      if (settled || Clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> lines;
    if (store_lost_) lines.push_back(store_lost_line());
    const auto now = Clock::now();
    for (int n = 0; n < opts_.nnodes; ++n) {
      const Peer& p = peers_[static_cast<size_t>(n)];
      if (n == opts_.node_rank || (store_lost_ && n == 0)) continue;
      if (p.exit_code && *p.exit_code != 0 && *p.exit_code != 130) {
        lines.push_back(failed_line(n, *p.exit_code));
      } else if (!p.exit_code && !store_lost_ && now - p.changed >= kSilentGone) {
        lines.push_back(silent_line(n, now - p.changed));
      }
    }
    return lines;
  }

  // Publishes this launcher's exit code and stops beating.
  void finish(int code) {
    stop_monitor();
    try {
      store_->set(key("exit", opts_.node_rank), bytes(std::to_string(code)));
    } catch (const std::exception& e) {
      FT_LOG_DEBUG("launcher: cannot publish the exit code: {}", first_line(e));
    }
  }

  // Node 0, at its end: the others' workers may still use the store, so it stays up until every other launcher
  // has ended or gone silent, at most `limit`, or until `interrupted()` (another SIGINT/SIGTERM).
  void wait_for_others(Clock::duration limit, const std::function<bool()>& interrupted) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline && !interrupted()) {
      try {
        observe(*store_);
      } catch (const std::exception&) {
        return;
      }
      bool done = true;
      {
        std::lock_guard<std::mutex> lock(mu_);
        const auto now = Clock::now();
        for (int n = 1; n < opts_.nnodes; ++n) {
          const Peer& p = peers_[static_cast<size_t>(n)];
          done = done && (p.exit_code || now - p.changed >= kSilentGone);
        }
      }
      if (done) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (interrupted()) return;
    FT_LOG_WARN("launcher: node 0 stops hosting the store after {} s while other nodes still run",
                std::chrono::duration_cast<std::chrono::seconds>(limit).count());
  }

 private:
  struct Peer {
    int64_t beats = -1;
    Clock::time_point changed = Clock::now();
    std::optional<int> exit_code;
  };

  std::string key(const std::string& what, int node) const { return fmt::format("{}{}/{}", kKeys, what, node); }

  // Every node writes "nnodes nproc host:pid" under its rank once (a second launcher with the same --node-rank is
  // refused), checks every other node's numbers against its own, and waits for every other node.
  void join() {
    const int me = opts_.node_rank;
    if (me == 0) {
      run_id_ = fmt::format("ft-{}-{}", ::getpid(), opts_.master_port);
      store_->set(kKeys + "run_id", bytes(run_id_));
    }
    const std::string mine = fmt::format("{} {} {}:{}", opts_.nnodes, nproc_, host_name(), ::getpid());
    const std::string holder = text(store_->compareSet(key("node", me), {}, bytes(mine)));
    if (holder != mine) {
      throw ConfigError(fmt::format("--node-rank {} is taken: the launcher {} joined as node {} already", me,
                                    holder.substr(holder.rfind(' ') + 1), me),
                        fmt::format("give each node's launcher its own --node-rank, 0 .. {}", opts_.nnodes - 1));
    }
    if (me != 0) run_id_ = text(store_->get(kKeys + "run_id"));  // waits for node 0, within the timeout
    // Every node checks every other as it joins, so that all of them refuse a run they disagree on.
    const auto deadline = Clock::now() + opts_.timeout;
    std::vector<int> missing;
    std::vector<bool> checked(static_cast<size_t>(opts_.nnodes), false);
    for (;;) {
      missing.clear();
      for (int n = 0; n < opts_.nnodes; ++n) {
        if (checked[static_cast<size_t>(n)]) continue;
        if (!store_->check({key("node", n)})) {
          missing.push_back(n);
          continue;
        }
        check_agrees(n, text(store_->get(key("node", n))));
        checked[static_cast<size_t>(n)] = true;
      }
      if (missing.empty() || Clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!missing.empty()) {
      throw Error(
          fmt::format("launcher of node {}: node{} {} did not join within {} s (distributed.timeout_s)", me,
                      missing.size() > 1 ? "s" : "", fmt::join(missing, ", "), opts_.timeout.count()),
          fmt::format("start one launcher on each node, with --nnodes {} and its own --node-rank", opts_.nnodes));
    }
  }

  // Node `n` joined with `record` ("nnodes nproc host:pid"): the same numbers as this node's, or a usage error.
  void check_agrees(int n, const std::string& record) const {
    std::istringstream in(record);
    int nnodes = 0, nproc = 0;
    in >> nnodes >> nproc;
    if (nnodes != opts_.nnodes) {
      throw ConfigError(fmt::format("node {} was started with --nnodes {}, node {} with --nnodes {}", n, nnodes,
                                    opts_.node_rank, opts_.nnodes),
                        "give every node's launcher the same --nnodes");
    }
    if (nproc != nproc_) {
      throw ConfigError(fmt::format("node {} starts {} workers, node {} {}: every node needs the same "
                                    "--nproc-per-node",
                                    n, nproc, opts_.node_rank, nproc_),
                        "give every node the same --nproc-per-node (with auto: the same number of visible GPUs)");
    }
  }

  // Reads the other nodes' heartbeats and exit codes through `store` (throws when it is unreachable).
  void observe(c10d::Store& store) {
    for (int n = 0; n < opts_.nnodes; ++n) {
      if (n == opts_.node_rank) continue;
      const int64_t beats = store.add(key("hb", n), 0);
      std::optional<int> code;
      if (store.check({key("exit", n)})) code = std::atoi(text(store.get(key("exit", n))).c_str());
      std::lock_guard<std::mutex> lock(mu_);
      Peer& p = peers_[static_cast<size_t>(n)];
      if (beats != p.beats) {
        p.beats = beats;
        p.changed = Clock::now();
      }
      p.exit_code = code;
    }
  }

  void monitor_loop() {
    for (;;) {
      try {
        monitor_store_->add(key("hb", opts_.node_rank), 1);
        observe(*monitor_store_);
        std::lock_guard<std::mutex> lock(mu_);
        const auto now = Clock::now();
        for (int n = 0; n < opts_.nnodes && problem_.empty(); ++n) {
          const Peer& p = peers_[static_cast<size_t>(n)];
          if (n == opts_.node_rank) continue;
          if (p.exit_code && *p.exit_code != 0 && *p.exit_code != 130) {
            problem_ = failed_line(n, *p.exit_code);
          } else if (!p.exit_code && now - p.changed >= opts_.timeout) {
            problem_ = silent_line(n, now - p.changed);
          }
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu_);
        store_lost_ = true;
        store_error_ = first_line(e);
        if (problem_.empty()) problem_ = store_lost_line();
        return;
      }
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, kBeatInterval, [this] { return stop_; })) return;
    }
  }

  void stop_monitor() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  std::string store_lost_line() const {
    return fmt::format("lost {}: the store its launcher hosted at {}:{} is unreachable ({})", node_name(0),
                       opts_.master_addr, opts_.master_port, store_error_);
  }
  std::string failed_line(int node, int code) const {
    return fmt::format("{} failed: its launcher ended with exit code {}", node_name(node), code);
  }
  std::string silent_line(int node, Clock::duration silent) const {
    return fmt::format("lost {}: its launcher has sent no heartbeat for {} s", node_name(node),
                       std::chrono::duration_cast<std::chrono::seconds>(silent).count());
  }

  LaunchOptions opts_;
  int nproc_;
  c10::intrusive_ptr<c10d::TCPStore> store_;       // node 0: the server, and this thread's connection to it
  c10::intrusive_ptr<c10d::Store> monitor_store_;  // the monitor thread's own connection
  std::string run_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<Peer> peers_;
  bool store_lost_ = false;
  std::string store_error_;
  std::string problem_;
  std::thread thread_;
};

int parse_int(const std::string& flag, const std::string& value, long low, long high, const std::string& hint) {
  errno = 0;
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || n < low || n > high) {
    throw ConfigError(fmt::format("{} '{}' is not a number in {}..{}", flag, value, low, high), hint);
  }
  return static_cast<int>(n);
}

// Where the workers find each other: a store hosted here for one node, or the group of nodes (`group`) for several.
Placement place_workers(int nproc, const LaunchOptions& options, c10::intrusive_ptr<c10d::TCPStore>& store,
                        std::unique_ptr<NodeGroup>& group) {
  Placement where;
  where.nproc = nproc;
  where.nnodes = options.nnodes;
  where.node = options.node_rank;
  where.addr = options.master_addr;
  if (options.nnodes > 1) {
    group = std::make_unique<NodeGroup>(options, nproc);
    where.port = options.master_port;
    where.run_id = group->run_id();
    return where;
  }
  c10d::TCPStoreOptions store_opts;
  store_opts.port = static_cast<std::uint16_t>(options.master_port);  // 0: the OS picks a free port, no race
  store_opts.isServer = true;
  store_opts.waitWorkers = false;
  store_opts.multiTenant = true;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_opts);
  } catch (const std::exception& e) {
    throw Error(fmt::format("launcher: cannot host the store on {}:{}: {}", options.master_addr, options.master_port,
                            first_line(e)),
                "is --master-port in use? leave it out to use a free port");
  }
  where.port = store->getPort();
  where.run_id = fmt::format("ft-{}-{}", ::getpid(), where.port);
  return where;
}

// Relays what the workers' open output streams hold, waiting up to 100 ms for some. False, without waiting, when no
// stream is open and no worker runs: nothing is left to watch.
bool relay_output(std::vector<Worker>& workers) {
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
  if (!any_running && fds.empty()) return false;
  ::poll(fds.data(), fds.size(), 100);
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents != 0) pump(*owners[i].first, *owners[i].second);
  }
  return true;
}

// What happened to this node's workers while the launcher watched them.
struct Outcome {
  int first_failed = -1;       // index of the first worker that failed on its own, or -1
  int forwarded = 0;           // the last signal forwarded to the workers, or 0
  bool stopped = false;        // a worker exited 130
  std::string remote_problem;  // a lost or failed node that made this one stop its workers
  std::optional<Clock::time_point> failed_at;
};

// Relays the workers' output and watches them until all have exited: a signal is forwarded to all, the first
// failure (or another node's, from `group`) stops the others with SIGTERM, and SIGKILL follows after the grace time.
Outcome supervise(std::vector<Worker>& workers, signals::Catcher& forwarding, NodeGroup* group,
                  const LaunchOptions& options, int first_rank) {
  Outcome out;
  std::optional<Clock::time_point> kill_at;
  auto stop_all = [&](int sig) {
    for (auto& w : workers)
      if (w.running) ::kill(w.pid, sig);
    if (sig != SIGKILL && !kill_at) kill_at = Clock::now() + options.grace;
  };
  for (;;) {
    const bool any_running = std::any_of(workers.begin(), workers.end(), [](const Worker& w) { return w.running; });
    if (!relay_output(workers)) break;
    if (const int sig = forwarding.take(); sig != 0) {
      out.forwarded = sig;
      stop_all(sig);
    }
    for (auto& w : workers) {
      if (!w.running || ::waitpid(w.pid, &w.status, WNOHANG) != w.pid) continue;
      w.running = false;
      // 130: the worker stopped at a signal after writing a checkpoint. The ranks agree on such a stop (a signal
      // to any of them, on any node, stops all), so the others are stopping too: not a failure.
      if (WIFEXITED(w.status) && WEXITSTATUS(w.status) == static_cast<int>(ExitCode::kInterrupted)) {
        out.stopped = true;
        continue;
      }
      if (process::failed(w.status) && out.first_failed < 0 && out.forwarded == 0 && !kill_at) {
        out.first_failed = w.rank - first_rank;
        out.failed_at = Clock::now();
        stop_all(SIGTERM);
      }
    }
    if (group != nullptr && out.remote_problem.empty() && any_running && !kill_at) {
      out.remote_problem = group->problem();
      if (!out.remote_problem.empty()) {
        out.failed_at = Clock::now();
        process::write_all(2, fmt::format("finetune launcher: {}; stopping the {} worker(s) of node {}.\n",
                                          out.remote_problem, workers.size(), options.node_rank));
        stop_all(SIGTERM);
      }
    }
    if (kill_at && Clock::now() > *kill_at) {
      stop_all(SIGKILL);
      kill_at = Clock::time_point::max();
    }
    // Output of a grandchild that outlived its worker must not keep us here.
    if (!any_running && kill_at == Clock::time_point::max()) break;
  }
  return out;
}

// The node's exit code: the first failed worker's (said on stderr with its last error), 1 for another node's
// failure, 130 for a stop at a signal, else 0.
int exit_code_of(const Outcome& out, const std::vector<Worker>& workers) {
  if (out.first_failed >= 0) {
    const Worker& w = workers[static_cast<size_t>(out.first_failed)];
    const std::string& why = w.last_error.empty() ? w.last_line : w.last_error;
    process::write_all(2, fmt::format("finetune launcher: rank {} (pid {}) {}; stopped the other {} worker(s).\n"
                                      "finetune launcher: rank {}'s last error: {}\n",
                                      w.rank, w.pid, process::describe_status(w.status), workers.size() - 1, w.rank,
                                      why.empty() ? "(no output)" : why));
    return WIFEXITED(w.status) ? WEXITSTATUS(w.status) : 1;
  }
  if (!out.remote_problem.empty()) return 1;
  if (out.forwarded != 0 || out.stopped) return 130;
  return 0;
}

}  // namespace

int launch_local(int nproc, const std::vector<std::string>& args, const LaunchOptions& options) {
  if (nproc < 1)
    throw ConfigError(fmt::format("--nproc-per-node {} must be >= 1", nproc), "use a positive number or auto");
  c10::intrusive_ptr<c10d::TCPStore> store;  // one node: hosted here
  std::unique_ptr<NodeGroup> group;          // several nodes
  const Placement where = place_workers(nproc, options, store, group);
  const int first_rank = options.node_rank * nproc;

  signals::Catcher forwarding;  // SIGINT/SIGTERM are forwarded to the workers below
  std::vector<Worker> workers(static_cast<size_t>(nproc));
  for (int r = 0; r < nproc; ++r) {
    std::vector<std::string> argv{options.executable};
    argv.insert(argv.end(), args.begin(), args.end());
    workers[static_cast<size_t>(r)].rank = first_rank + r;
    start(workers[static_cast<size_t>(r)], options.executable, std::move(argv), worker_environment(r, where));
  }
  if (group) {
    group->start_monitor();
    FT_LOG_INFO("launcher: node {} of {}, {} workers (ranks {}-{} of {}), store {}:{}, run id {}", options.node_rank,
                options.nnodes, nproc, first_rank, first_rank + nproc - 1, nproc * options.nnodes, where.addr,
                where.port, where.run_id);
  } else {
    FT_LOG_INFO("launcher: {} workers, store {}:{}, run id {}", nproc, where.addr, where.port, where.run_id);
  }

  const Outcome out = supervise(workers, forwarding, group.get(), options, first_rank);
  const int code = exit_code_of(out, workers);
  if (group) {
    if (code != 0 && code != 130 && out.failed_at) {
      // Which other nodes are gone: the failure here is often the first sign of their loss.
      for (const std::string& line : group->lost_nodes(*out.failed_at)) {
        if (line != out.remote_problem) process::write_all(2, "finetune launcher: " + line + "\n");
      }
    }
    group->finish(code);
    if (options.node_rank == 0) {
      const int signals_seen = forwarding.count();
      group->wait_for_others(code == 0 || code == 130 ? Clock::duration(options.timeout)
                                                      : Clock::duration(2 * options.grace + std::chrono::seconds(5)),
                             [&] { return forwarding.count() > signals_seen; });
    }
  }
  return code;
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

LaunchOptions parse_node_options(const std::string& nnodes, const std::string& node_rank,
                                 const std::string& master_addr, const std::string& master_port) {
  LaunchOptions out;
  if (!nnodes.empty()) {
    if (nnodes.find(':') != std::string::npos) {
      throw ConfigError(fmt::format("--nnodes '{}' is an elastic range: the built-in launcher runs a fixed number of "
                                    "nodes",
                                    nnodes),
                        "give one number, e.g. --nnodes 2 (torchrun runs elastic jobs)");
    }
    out.nnodes = parse_int("--nnodes", nnodes, 1, 65536, "the number of nodes, e.g. --nnodes 2");
  }
  if (!node_rank.empty()) {
    out.node_rank = parse_int("--node-rank", node_rank, 0, INT_MAX, "this node's index, 0 .. nnodes-1");
  }
  if (out.node_rank >= out.nnodes) {
    throw ConfigError(
        fmt::format("--node-rank {} is not below --nnodes {}", out.node_rank, out.nnodes),
        fmt::format("nodes are numbered 0 .. {}; node 0 hosts the store at --master-addr", out.nnodes - 1));
  }
  if (!master_port.empty()) {
    out.master_port = parse_int("--master-port", master_port, 1, 65535,
                                "a TCP port that is free on node 0, the same on every node, e.g. 29500");
  } else if (out.nnodes > 1) {
    out.master_port = 29500;  // torchrun's default
  }
  if (!master_addr.empty()) {
    out.master_addr = master_addr;
  } else if (out.nnodes > 1) {
    throw ConfigError(fmt::format("--nnodes {} needs --master-addr: node 0's address, where the workers of every "
                                  "node find the store",
                                  out.nnodes),
                      "give every node the same --master-addr, e.g. --master-addr 10.0.0.1 (node 0's address)");
  }
  return out;
}

std::vector<std::string> worker_args(const std::vector<std::string>& argv) {
  static const std::set<std::string> kOptions = {"--nproc-per-node", "--nproc_per_node", "--nnodes",
                                                 "--node-rank",      "--node_rank",      "--master-addr",
                                                 "--master_addr",    "--master-port",    "--master_port"};
  std::vector<std::string> out;
  for (size_t i = 1; i < argv.size(); ++i) {
    if (kOptions.count(argv[i]) != 0) {
      ++i;  // and its value
      continue;
    }
    const auto eq = argv[i].find('=');
    if (eq != std::string::npos && kOptions.count(argv[i].substr(0, eq)) != 0) continue;
    out.push_back(argv[i]);
  }
  return out;
}

}  // namespace ft::dist
