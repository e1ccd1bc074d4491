#include "dist/env.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "util/error.h"

namespace ft::dist {
namespace {

std::optional<std::string> process_getenv(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

class Reader {
 public:
  explicit Reader(const GetEnv& fn) : fn_(fn ? fn : GetEnv(process_getenv)) {}

  // Unset and empty are the same: launchers often export empty variables.
  std::optional<std::string> str(const std::string& name) const {
    auto value = fn_(name);
    if (!value || value->empty()) return std::nullopt;
    return value;
  }

  std::optional<int> integer(const std::string& name, int min_value) const {
    auto text = str(name);
    if (!text) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    const long value = std::strtol(text->c_str(), &end, 10);
    if (errno != 0 || end == text->c_str() || *end != '\0' || value < min_value ||
        value > std::numeric_limits<int>::max()) {
      throw ConfigError(fmt::format("environment variable {}='{}' is not an integer >= {}", name, *text, min_value),
                        "fix or unset it; torchrun and the built-in launcher set it for you");
    }
    return static_cast<int>(value);
  }

 private:
  GetEnv fn_;
};

}  // namespace

DistEnv read_env(const GetEnv& getenv_fn) {
  const Reader env(getenv_fn);
  DistEnv out;

  auto rank = env.integer("RANK", 0);
  auto world = env.integer("WORLD_SIZE", 1);
  const bool torchrun = env.str("TORCHELASTIC_RUN_ID").has_value();
  if (rank || world) {
    out.source = env.str("FT_LAUNCHER") ? "launcher" : torchrun ? "torchrun" : "env";
  } else if (env.str("SLURM_PROCID") && env.str("SLURM_NTASKS")) {
    rank = env.integer("SLURM_PROCID", 0);
    world = env.integer("SLURM_NTASKS", 1);
    out.source = "slurm";
  } else {
    return out;  // not launched as part of a distributed run
  }
  if (!rank || !world) {
    throw ConfigError(fmt::format("{} is set but {} is not", rank ? "RANK" : "WORLD_SIZE", rank ? "WORLD_SIZE" : "RANK"),
                      "set both (torchrun and `finetune train --nproc-per-node N` do), or neither for one process");
  }
  out.rank = *rank;
  out.world_size = *world;
  if (out.rank >= out.world_size) {
    throw ConfigError(fmt::format("RANK={} is not below WORLD_SIZE={}", out.rank, out.world_size),
                      "ranks count from 0 to WORLD_SIZE-1");
  }

  auto local_world = env.integer("LOCAL_WORLD_SIZE", 1);
  if (!local_world && out.source == "slurm") local_world = env.integer("SLURM_NTASKS_PER_NODE", 1);
  out.local_world_size = local_world.value_or(out.world_size);
  if (out.local_world_size > out.world_size) {
    throw ConfigError(fmt::format("LOCAL_WORLD_SIZE={} exceeds WORLD_SIZE={}", out.local_world_size, out.world_size),
                      "LOCAL_WORLD_SIZE counts the processes on this node only");
  }
  auto local_rank = env.integer("LOCAL_RANK", 0);
  if (!local_rank) local_rank = env.integer("SLURM_LOCALID", 0);
  out.local_rank = local_rank.value_or(out.rank % out.local_world_size);
  if (out.local_rank >= out.local_world_size) {
    throw ConfigError(
        fmt::format("LOCAL_RANK={} is not below LOCAL_WORLD_SIZE={}", out.local_rank, out.local_world_size),
        "set LOCAL_WORLD_SIZE to the number of processes per node");
  }
  auto group_rank = env.integer("GROUP_RANK", 0);
  if (!group_rank) group_rank = env.integer("SLURM_NODEID", 0);
  out.group_rank = group_rank.value_or(out.rank / out.local_world_size);

  out.use_agent_store = env.str("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  out.run_id = env.str("TORCHELASTIC_RUN_ID").value_or(env.str("SLURM_JOB_ID").value_or(""));
  out.restart_count = env.integer("TORCHELASTIC_RESTART_COUNT", 0).value_or(0);
  out.max_restarts = env.integer("TORCHELASTIC_MAX_RESTARTS", 0).value_or(0);

  if (out.distributed()) {
    auto addr = env.str("MASTER_ADDR");
    if (!addr) {
      throw ConfigError(fmt::format("WORLD_SIZE={} but MASTER_ADDR is not set", out.world_size),
                        "export MASTER_ADDR (the host of rank 0) and MASTER_PORT; on Slurm e.g. "
                        "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)");
    }
    auto port = env.integer("MASTER_PORT", 1);
    if (!port) {
      throw ConfigError(fmt::format("WORLD_SIZE={} but MASTER_PORT is not set", out.world_size),
                        "export MASTER_PORT, a free TCP port on MASTER_ADDR (e.g. 29500)");
    }
    if (*port > 65535) throw ConfigError(fmt::format("MASTER_PORT={} is not a TCP port", *port), "use 1..65535");
    out.master_addr = *addr;
    out.master_port = *port;
  } else {
    out.master_addr = env.str("MASTER_ADDR").value_or("");
    out.master_port = env.integer("MASTER_PORT", 0).value_or(0);
  }
  return out;
}

std::string describe(const DistEnv& env) {
  if (!env.distributed()) return "single process";
  return fmt::format("rank {}/{} (local {}/{}, node {}), store {}:{}{} [{}]", env.rank, env.world_size,
                     env.local_rank, env.local_world_size, env.group_rank, env.master_addr, env.master_port,
                     env.use_agent_store ? " (agent)" : "", env.source);
}

}  // namespace ft::dist
