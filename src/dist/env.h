// The process's place in a distributed run, read from the environment that torchrun, the built-in launcher,
// Slurm or a Kubernetes job sets. Pure parsing: nothing here touches the network.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace ft::dist {

struct DistEnv {
  int rank = 0;              // global rank, 0 <= rank < world_size
  int local_rank = 0;        // rank on this node: picks the GPU
  int world_size = 1;        // processes in the run
  int local_world_size = 1;  // processes on this node
  int group_rank = 0;        // node index (torchrun GROUP_RANK / Slurm SLURM_NODEID)
  std::string master_addr;   // host of the rendezvous TCPStore; empty when not distributed
  int master_port = 0;       // its port
  bool use_agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True: the agent hosts the store, rank 0 is a client
  std::string run_id;        // TORCHELASTIC_RUN_ID (or SLURM_JOB_ID); empty when unknown
  int restart_count = 0;     // TORCHELASTIC_RESTART_COUNT: keeps store keys of a restarted attempt apart
  int max_restarts = 0;      // TORCHELASTIC_MAX_RESTARTS
  std::string source = "none";  // where the values came from: none | launcher | torchrun | env | slurm

  bool distributed() const { return world_size > 1; }
};

// Reads the variables through `getenv_fn` (nullopt = unset); the default reads the process environment.
// Precedence: RANK/WORLD_SIZE (torchrun, Kubernetes, launcher) over SLURM_PROCID/SLURM_NTASKS.
// LOCAL_RANK falls back to SLURM_LOCALID, then to rank % LOCAL_WORLD_SIZE; LOCAL_WORLD_SIZE to
// SLURM_NTASKS_PER_NODE, then to world_size when there is no other hint (one node).
// Throws ft::ConfigError naming the variable for missing, malformed or inconsistent values.
using GetEnv = std::function<std::optional<std::string>(const std::string&)>;
DistEnv read_env(const GetEnv& getenv_fn = {});

// One line for logs: "rank 1/4 (local 1/2, node 0), store 10.0.0.1:29500 (agent)".
std::string describe(const DistEnv& env);

}  // namespace ft::dist
