// The built-in launcher (`finetune train --nproc-per-node N|auto ...`) for hosts without Python and for the
// Docker entrypoint: torchrun's single-node contract without torchrun.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ft::dist {

struct LaunchOptions {
  std::string executable = "/proc/self/exe";  // the program each worker runs
  std::string master_addr = "127.0.0.1";      // where workers find the store this launcher hosts
  std::chrono::seconds grace{10};             // SIGTERM -> SIGKILL delay when stopping the other workers
};

// Spawns `nproc` workers running `executable args...` (args: everything after the program name, without the
// --nproc-per-node flag) with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK=0, MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_RUN_ID/RESTART_COUNT/MAX_RESTARTS and TORCHELASTIC_USE_AGENT_STORE=True: like
// torchrun's agent, the launcher hosts the TCPStore (on a free port) and every worker connects as a client, so the
// store outlives any one worker. Every output line is prefixed with "[rank N] " (stdout and stderr kept apart).
// SIGINT/SIGTERM are forwarded to the workers. When a worker exits non-zero or is killed, the others get SIGTERM
// (then SIGKILL after `grace`), the launcher prints which rank failed, how, and its last error line.
// Returns 0 when every worker succeeded, 130 after a forwarded SIGINT/SIGTERM, else the failed worker's exit code
// (1 when it was killed by a signal).
int launch_local(int nproc, const std::vector<std::string>& args, const LaunchOptions& options = {});

// Visible CUDA devices, or 1 without CUDA (for --nproc-per-node auto).
int nproc_auto();

// Parses the value of --nproc-per-node: a positive integer or "auto"; throws ft::ConfigError otherwise.
int parse_nproc(const std::string& value);

}  // namespace ft::dist
