// Multi-process runs of dist_worker (CPU, Gloo): the built-in launcher, real torchrun (static and c10d
// rendezvous, two "nodes" on one host), hand-started ranks, failures (exit codes, kill -9) and signals.
// The numerical checks live in the worker (collectives against closed forms, DDP against an in-process
// single-process reference on the concatenated batch); here we check exit codes and the reported numbers.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "support/test_support.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string worker() {
  const char* v = std::getenv("FT_DIST_WORKER");
  return v != nullptr && *v != '\0' ? v : FT_DIST_WORKER_PATH;
}

using ft::test::free_port;
using ft::test::python;
using ft::test::TempDir;

struct Result {
  int code = -1;
  std::string output;
};

// Runs `cmd` through /bin/sh (stderr merged), bounded by `timeout` so that nothing can hang the suite.
Result run(const std::string& cmd, int timeout_s = 90) {
  ::setenv("OMP_NUM_THREADS", "1", 0);  // two ranks on a shared 2-core host
  Result r;
  const std::string full = "timeout -k 5 " + std::to_string(timeout_s) + " sh -c '" + cmd + "' 2>&1";
  FILE* pipe = ::popen(full.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits until `file` contains `needle`; returns the file's text (empty on timeout).
std::string wait_for(const fs::path& file, const std::string& needle, double timeout_s) {
  const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < end) {
    std::string text = slurp(file);
    if (text.find(needle) != std::string::npos) return text;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return {};
}

int pid_after(const std::string& text, const std::string& prefix) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(prefix + "pid (\\d+)"))) return -1;
  return std::stoi(m[1]);
}

// Every "max_..._diff=X" the DDP workers printed, all <= 1e-6, and one line per rank.
void expect_ddp_matches(const Result& r, int ranks) {
  ASSERT_EQ(r.code, 0) << r.output;
  const std::regex line("max_grad_diff=([0-9.e+-]+) max_param_diff=([0-9.e+-]+)");
  int seen = 0;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it, ++seen) {
    EXPECT_LE(std::stod((*it)[1]), 1e-6) << r.output;
    EXPECT_LE(std::stod((*it)[2]), 1e-6) << r.output;
  }
  EXPECT_EQ(seen, ranks) << r.output;
}

std::string torchrun() {
  return python() + " -m torch.distributed.run";
}

TEST(DistLauncher, RunsCollectivesWithRankPrefixedOutput) {
  const Result r = run(worker() + " launch 2 collectives");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 1] rank 1/2 (local 1/2, node 0), store 127.0.0.1:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(agent) [launcher]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 0] collectives ok on rank 0 of 2 (gloo)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 1] collectives ok on rank 1 of 2 (gloo)"), std::string::npos) << r.output;
}

TEST(DistLauncher, DdpTwoRanksMatchOneProcessWithDoubledBatchSummedGradients) {
  expect_ddp_matches(run(worker() + " launch 2 ddp 3 sum"), 2);
}

TEST(DistLauncher, DdpTwoRanksMatchOneProcessWithDoubledBatchAveragedGradients) {
  expect_ddp_matches(run(worker() + " launch 2 ddp 2 mean"), 2);
}

// bf16 all-reduce (distributed.reduce_dtype: bf16): the reduced gradients are bf16 numbers within one bf16 ulp
// of the fp32 single-process gradients, for the summed and the averaged reduction.
TEST(DistLauncher, DdpBf16ReductionGivesBf16RoundedGradients) {
  for (const std::string reduction : {"sum", "mean"}) {
    const Result r = run(worker() + " launch 2 ddp 3 " + reduction + " bf16");
    ASSERT_EQ(r.code, 0) << r.output;
    const std::regex line("bf16_values=1 grad_diff_in_ulps=([0-9.e+-]+)");
    int seen = 0;
    for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it, ++seen) {
      EXPECT_GT(std::stod((*it)[1]), 0.0) << "rounded, so not exactly the fp32 sums: " << r.output;
      EXPECT_LE(std::stod((*it)[1]), 1.0) << r.output;
    }
    EXPECT_EQ(seen, 2) << reduction << ": " << r.output;
  }
}

TEST(DistLauncher, ZeroOneBroadcastGivesEveryRankTheOwnersParameters) {
  const Result r = run(worker() + " launch 2 zero");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("zero broadcast ok on rank 0 of 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("zero broadcast ok on rank 1 of 2"), std::string::npos) << r.output;
}

TEST(DistSingleProcess, DdpWithoutEnvironmentIsPlainTraining) {
  const Result r = run("env -u RANK -u WORLD_SIZE " + worker() + " ddp 4 sum");
  expect_ddp_matches(r, 1);
  EXPECT_NE(r.output.find("single process"), std::string::npos) << r.output;
}

TEST(DistTorchrun, StaticRendezvousDdp) {
  const int port = free_port();
  expect_ddp_matches(run(torchrun() + " --nproc-per-node 2 --master-addr 127.0.0.1 --master-port " +
                         std::to_string(port) + " --no-python " + worker() + " ddp 2 sum"),
                     2);
}

TEST(DistTorchrun, C10dRendezvousCollectives) {
  const int port = free_port();
  const Result r =
      run(torchrun() + " --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" + std::to_string(port) +
          " --no-python " + worker() + " collectives");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("collectives ok on rank 1 of 2"), std::string::npos) << r.output;
}

TEST(DistTorchrun, TwoNodesOnOneHostDdp) {
  const int port = free_port();
  const std::string node = torchrun() + " --nnodes 2 --nproc-per-node 1 --master-addr 127.0.0.1 --master-port " +
                           std::to_string(port) + " --node-rank ";
  const Result r = run("(" + node + "1 --no-python " + worker() + " ddp 2 sum) & " + node + "0 --no-python " +
                       worker() + " ddp 2 sum; a=$?; wait $!; b=$?; exit $((a + b))");
  expect_ddp_matches(r, 2);
  EXPECT_NE(r.output.find("rank 1/2 (local 0/1, node 1)"), std::string::npos) << r.output;
}

// Slurm/Kubernetes style: plain RANK/WORLD_SIZE/MASTER_*, rank 0 hosts the store; a normal exit is quiet (the
// store outlives the other ranks' last use of it).
TEST(DistPlainEnv, HandStartedRanksRunCollectivesAndExitCleanly) {
  const std::string common = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port()) + " ";
  const Result r = run("(RANK=1 " + common + worker() + " collectives) & RANK=0 " + common + worker() +
                       " collectives; a=$?; wait $!; b=$?; exit $((a + b))");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1/2 (local 1/2, node 0), store 127.0.0.1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("collectives ok on rank 0 of 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("collectives ok on rank 1 of 2"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("TCPStore"), std::string::npos) << r.output;
}

// The built-in launcher as two nodes of 2 workers (--nnodes 2 --node-rank 0|1): the workers get torchrun's ranks
// (RANK = node * 2 + local) and form one run through node 0's store.
TEST(DistLauncher, TwoNodesGiveTorchrunsRanks) {
  const std::string node = worker() + " launch-node 2 2 ";
  const std::string where = " 127.0.0.1 " + std::to_string(free_port()) + " collectives";
  const Result r =
      run("(" + node + "1" + where + ") & " + node + "0" + where + "; a=$?; wait $!; b=$?; exit $((a + b))");
  ASSERT_EQ(r.code, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.output.find("[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) + "/4 (local " +
                            std::to_string(rank % 2) + "/2, node " + std::to_string(rank / 2) + "), store 127.0.0.1:"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("collectives ok on rank " + std::to_string(rank) + " of 4 (gloo)"), std::string::npos)
        << r.output;
  }
}

// Launchers that disagree are refused before any worker starts, each with a usage error (exit code 2): another
// --nproc-per-node than the other node's, or a --node-rank that another launcher holds. A node that never joins is
// named by the others after their timeout.
TEST(DistLauncher, NodesThatDisagreeOrNeverJoinAreRefused) {
  const std::string where = " 127.0.0.1 " + std::to_string(free_port()) + " collectives";
  const Result r = run("(" + worker() + " launch-node 2 2 0" + where + "; echo node0=$?) & " + worker() +
                       " launch-node 1 2 1" + where + "; echo node1=$?; wait");
  EXPECT_NE(r.output.find("node 0 starts 2 workers, node 1 1: every node needs the same --nproc-per-node"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("node 1 starts 1 workers, node 0 2: every node needs the same --nproc-per-node"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("node0=2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("node1=2"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[rank "), std::string::npos) << "no worker started\n" << r.output;

  // Node 0 and node 1 run; once they have started their workers, a second node 1 tries to join.
  TempDir dir;
  const std::string log1 = (dir / "node1.log").string();
  const std::string steps = " 127.0.0.1 " + std::to_string(free_port()) + " steps 300";
  const Result twice =
      run(worker() + " launch-node 2 2 0" + steps + " > /dev/null 2>&1 & p0=$!; " + worker() + " launch-node 2 2 1" +
          steps + " > " + log1 + " 2>&1 & p1=$!; " + "until grep -q \"launcher: node 1 of 2\" " + log1 +
          "; do sleep 0.1; done; " + worker() + " launch-node 2 2 1" + steps + "; echo again=$?; kill $p0 $p1; wait");
  EXPECT_NE(twice.output.find("--node-rank 1 is taken: the launcher "), std::string::npos) << twice.output;
  EXPECT_NE(twice.output.find("again=2"), std::string::npos) << twice.output;

  const Result alone = run("FT_DIST_TIMEOUT=3 " + worker() + " launch-node 2 2 0 127.0.0.1 " +
                           std::to_string(free_port()) + " collectives");
  EXPECT_EQ(alone.code, 1) << alone.output;
  EXPECT_NE(alone.output.find("launcher of node 0: node 1 did not join within 3 s"), std::string::npos) << alone.output;
}

TEST(DistLauncher, WorkerExitCodeStopsTheRunNamingTheRank) {
  const Result r = run(worker() + " launch 2 exit3");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("rank 1 (pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exited with code 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("last error: error: deliberate failure on rank 1"), std::string::npos) << r.output;
}

// Hand-started ranks (rank 0 hosts the store, no launcher to clean up): kill -9 (or stop) one rank mid-run; the
// other must exit non-zero by itself, within its timeout (+ a few seconds of diagnosis), naming the lost rank.
void kill_one_rank(int victim, int sig = SIGKILL, int timeout_s = 20) {
  TempDir dir;
  const int port = free_port();
  const int survivor = 1 - victim;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = (dir / ("r" + std::to_string(rank) + ".log")).string();
    const std::string rc = (dir / ("rc" + std::to_string(rank))).string();
    const std::string cmd = "(RANK=" + std::to_string(rank) +
                            " WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                            " FT_DIST_TIMEOUT=" + std::to_string(timeout_s) + " timeout -k 5 60 " + worker() +
                            " steps 300 > " + log + " 2>&1; echo $? > " + rc + ") &";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  const std::string victim_log = wait_for(dir / ("r" + std::to_string(victim) + ".log"), "step 3", 30);
  ASSERT_FALSE(victim_log.empty()) << slurp(dir / "r0.log") << slurp(dir / "r1.log");
  const int pid = pid_after(victim_log, "");
  ASSERT_GT(pid, 0) << victim_log;
  ASSERT_EQ(::kill(pid, sig), 0);
  const auto killed_at = Clock::now();
  const std::string rc = wait_for(dir / ("rc" + std::to_string(survivor)), "\n", 40);
  if (sig != SIGKILL) ::kill(pid, SIGKILL);
  const double seconds = std::chrono::duration<double>(Clock::now() - killed_at).count();
  const std::string log = slurp(dir / ("r" + std::to_string(survivor) + ".log"));
  ASSERT_FALSE(rc.empty()) << "survivor did not exit\n" << log;
  EXPECT_NE(std::stoi(rc), 0) << log;
  // A killed peer is noticed at once; a hung one at the timeout, plus the 2.5 s heartbeat probe.
  EXPECT_LT(seconds, sig == SIGKILL ? timeout_s : timeout_s + 6) << log;
  EXPECT_NE(log.find("lost rank " + std::to_string(victim)), std::string::npos) << log;
}

TEST(DistFailure, KilledRankIsNamedBySurvivor) {
  kill_one_rank(1);
}

TEST(DistFailure, KilledStoreHostIsNamedBySurvivor) {
  kill_one_rank(0);
}

// A stopped (hung) rank keeps its sockets open: the survivor fails at the 5 s collective timeout instead.
TEST(DistFailure, HungRankTimesOutAndIsNamed) {
  kill_one_rank(1, SIGSTOP, 5);
}

TEST(DistLauncher, KilledWorkerStopsTheOthersNamingIt) {
  TempDir dir;
  const fs::path out = dir / "out.log";
  const fs::path rc = dir / "rc";
  const std::string cmd = "(FT_DIST_TIMEOUT=20 timeout -k 5 60 " + worker() + " launch 2 steps 300 > " + out.string() +
                          " 2>&1; echo $? > " + rc.string() + ") &";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string text = wait_for(out, "[rank 1] step 3", 30);
  ASSERT_FALSE(text.empty()) << slurp(out);
  const int pid = pid_after(text, "\\[rank 1\\] ");
  ASSERT_GT(pid, 0) << text;
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  const auto killed_at = Clock::now();
  const std::string code = wait_for(rc, "\n", 40);
  const std::string log = slurp(out);
  ASSERT_FALSE(code.empty()) << log;
  EXPECT_NE(std::stoi(code), 0) << log;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - killed_at).count(), 20.0) << log;
  EXPECT_NE(log.find("rank 1 (pid " + std::to_string(pid) + ") was killed by signal 9"), std::string::npos) << log;
}

// Two nodes of the built-in launcher; node 1's launcher is SIGKILLed (its workers die with it): node 0's ranks fail
// their next all-reduce naming the lost ranks, and node 0's launcher names the node that went silent.
TEST(DistLauncher, LostNodeIsNamedByTheOtherNode) {
  TempDir dir;
  const std::string where = " 127.0.0.1 " + std::to_string(free_port()) + " steps 300";
  for (int node : {1, 0}) {
    const std::string n = std::to_string(node);
    const std::string cmd = "(timeout -k 5 60 " + worker() + " launch-node 2 2 " + n + where + " > " +
                            (dir / ("node" + n + ".log")).string() + " 2>&1 & echo $! > " +
                            (dir / ("pid" + n)).string() + "; wait $!; echo $? > " + (dir / ("rc" + n)).string() +
                            ") &";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  ASSERT_FALSE(wait_for(dir / "node0.log", "[rank 0] step 3", 30).empty()) << slurp(dir / "node0.log");
  ASSERT_FALSE(wait_for(dir / "node1.log", "[rank 3] step 3", 30).empty()) << slurp(dir / "node1.log");
  // `timeout` runs the launcher as its child: the launcher is the only child of that pid.
  const std::string timeout_pid = wait_for(dir / "pid1", "\n", 5);
  ASSERT_FALSE(timeout_pid.empty());
  const Result child = run("pgrep -P " + std::to_string(std::stoi(timeout_pid)));
  ASSERT_EQ(child.code, 0) << child.output;
  ASSERT_EQ(::kill(std::stoi(child.output), SIGKILL), 0);
  const auto killed_at = Clock::now();
  const std::string code = wait_for(dir / "rc0", "\n", 40);
  const std::string log = slurp(dir / "node0.log");
  ASSERT_FALSE(code.empty()) << log;
  EXPECT_EQ(std::stoi(code), 1) << log;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - killed_at).count(), 15.0) << log;
  EXPECT_NE(log.find("(lost ranks 2, 3)"), std::string::npos) << log;
  EXPECT_NE(log.find("finetune launcher: lost node 1 (ranks 2-3): its launcher has sent no heartbeat for "),
            std::string::npos)
      << log;
}

TEST(DistLauncher, ForwardsSigtermToWorkers) {
  TempDir dir;
  const fs::path out = dir / "out.log";
  const fs::path pidfile = dir / "pid";
  const fs::path rc = dir / "rc";
  const std::string cmd = "(" + worker() + " launch 2 steps 300 > " + out.string() + " 2>&1 & echo $! > " +
                          pidfile.string() + "; wait $!; echo $? > " + rc.string() + ") &";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ASSERT_FALSE(wait_for(out, "[rank 1] step 2", 30).empty()) << slurp(out);
  const std::string pid_text = wait_for(pidfile, "\n", 5);
  ASSERT_FALSE(pid_text.empty());
  const int launcher_pid = std::stoi(pid_text);
  ASSERT_EQ(::kill(launcher_pid, SIGTERM), 0);
  const std::string code = wait_for(rc, "\n", 20);
  ASSERT_FALSE(code.empty()) << slurp(out);
  EXPECT_EQ(std::stoi(code), 130) << slurp(out);
}

}  // namespace
