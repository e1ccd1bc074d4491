// The built-in launcher (`finetune train --nproc-per-node N|auto [--nnodes M --node-rank R --master-addr A
// --master-port P] ...`) for hosts without Python and for the Docker entrypoint: torchrun's static-rendezvous
// contract without torchrun, on one node or several.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ft::dist {

struct LaunchOptions {
  std::string executable = "/proc/self/exe";  // the program each worker runs
  int nnodes = 1;                             // nodes, each running one launcher (--nnodes)
  int node_rank = 0;                          // this node's index, 0 .. nnodes-1 (--node-rank)
  std::string master_addr = "127.0.0.1";      // node 0's address: where every worker finds the store (--master-addr)
  int master_port = 0;                        // the store's port; 0: a free one (one node only) (--master-port)
  std::chrono::seconds grace{10};             // SIGTERM -> SIGKILL delay when stopping the other workers
  // How long the nodes' launchers wait for each other to join, and how long a node may send no heartbeat before
  // the others count it lost (train passes distributed.timeout_s, the collectives' timeout).
  std::chrono::seconds timeout{600};
};

// Spawns `nproc` workers running `executable args...` (args: everything after the program name, without the
// launcher's own options) with torchrun's worker environment: RANK = node_rank * nproc + local rank, LOCAL_RANK,
// WORLD_SIZE = nnodes * nproc, LOCAL_WORLD_SIZE = nproc, GROUP_RANK = node_rank, GROUP_WORLD_SIZE = nnodes,
// ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID/RESTART_COUNT/MAX_RESTARTS and
// TORCHELASTIC_USE_AGENT_STORE=True: like torchrun's agents, the launcher of node 0 hosts the TCPStore (one node:
// on a free port unless master_port is set; several: on master_port) and every worker connects to it as a client,
// so the store outlives any one worker.
//
// Several nodes: the launchers first meet through the store (within `timeout`): each node joins once, and all
// must agree on nnodes and on the number of workers per node, else a ft::ConfigError names the difference. Each
// launcher then beats in the store every second. A node counts as lost when the store becomes unreachable (node 0's
// launcher is gone), when its heartbeat stops for `timeout`, or when its launcher ended with a failure: the other
// launchers then stop their workers and print "finetune launcher: lost node N (ranks a-b): why". Node 0 keeps the
// store up until the other nodes' launchers have ended (or gone silent), so that they can finish and report.
//
// Every output line is prefixed with "[rank N] " (the global rank; stdout and stderr kept apart). SIGINT/SIGTERM
// are forwarded to the workers. When a worker exits non-zero or is killed, the others get SIGTERM (then SIGKILL
// after `grace`), the launcher prints which rank failed, how, and its last error line, and (several nodes) which
// other nodes are lost. A worker exiting with 130 (stopped at a signal, checkpoint written: a signal to any rank,
// on any node, stops them all) is no failure. Returns 0 when every worker succeeded, 130 after a forwarded
// SIGINT/SIGTERM or such a stop, else the failed worker's exit code (1 when it was killed by a signal, or when
// this node stopped for a lost node).
int launch_local(int nproc, const std::vector<std::string>& args, const LaunchOptions& options = {});

// Visible CUDA devices, or 1 without CUDA (for --nproc-per-node auto).
int nproc_auto();

// Parses the value of --nproc-per-node: a positive integer or "auto"; throws ft::ConfigError otherwise.
int parse_nproc(const std::string& value);

// The multi-node options as given on the command line ("" when not given), checked, with torchrun's defaults:
// --nnodes 1, --node-rank 0, --master-port 29500 on several nodes (a free port on one). --master-addr is required
// when nnodes > 1 (a default of 127.0.0.1 would make every other node wait for a store on itself); on one node it
// defaults to 127.0.0.1. Throws ft::ConfigError (exit code 2) for a value that is not a number, nnodes < 1,
// node-rank outside 0 .. nnodes-1, a port outside 1..65535, or a missing --master-addr.
LaunchOptions parse_node_options(const std::string& nnodes, const std::string& node_rank,
                                 const std::string& master_addr, const std::string& master_port);

// The launcher's options (--nproc-per-node, --nnodes, --node-rank, --master-addr, --master-port, and torchrun's
// underscore spellings, each as "--opt V" or "--opt=V") removed from a command line: what the workers run.
// argv[0] (the program) is dropped too.
std::vector<std::string> worker_args(const std::vector<std::string>& argv);

}  // namespace ft::dist
