// DistEnv parsing: torchrun, plain (Kubernetes) and Slurm environments, and the errors for bad ones.
#include <gtest/gtest.h>

#include <map>

#include "dist/env.h"
#include "dist/launcher.h"
#include "util/error.h"

namespace {

using ft::dist::DistEnv;
using ft::dist::read_env;

DistEnv parse(const std::map<std::string, std::string>& vars) {
  return read_env([&](const std::string& key) -> std::optional<std::string> {
    auto it = vars.find(key);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    parse(vars);
  } catch (const ft::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DistEnv, NoVariablesMeansOneProcess) {
  const DistEnv env = parse({});
  EXPECT_FALSE(env.distributed());
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.source, "none");
}

TEST(DistEnv, ReadsTorchrunContractWithAgentStore) {
  const DistEnv env = parse({{"RANK", "5"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"},
                             {"GROUP_RANK", "1"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"},
                             {"TORCHELASTIC_RUN_ID", "job7"}, {"TORCHELASTIC_RESTART_COUNT", "2"},
                             {"TORCHELASTIC_MAX_RESTARTS", "3"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  EXPECT_TRUE(env.distributed());
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.group_rank, 1);
  EXPECT_EQ(env.master_addr, "node0");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_TRUE(env.use_agent_store);
  EXPECT_EQ(env.run_id, "job7");
  EXPECT_EQ(env.restart_count, 2);
  EXPECT_EQ(env.max_restarts, 3);
  EXPECT_EQ(env.source, "torchrun");
}

TEST(DistEnv, AgentStoreOnlyForTheExactValueTrue) {
  EXPECT_FALSE(parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"},
                      {"TORCHELASTIC_USE_AGENT_STORE", "False"}})
                   .use_agent_store);
}

TEST(DistEnv, PlainEnvironmentDerivesLocalRankFromLocalWorldSize) {
  const DistEnv env =
      parse({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"},
             {"MASTER_PORT", "23456"}});
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.group_rank, 1);
  EXPECT_FALSE(env.use_agent_store);
  EXPECT_EQ(env.source, "env");
}

TEST(DistEnv, PlainEnvironmentWithoutLocalHintsIsOneNode) {
  const DistEnv env = parse({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "2"}});
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
}

TEST(DistEnv, SlurmVariablesWhenRankIsUnset) {
  const DistEnv env = parse({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "2"},
                             {"SLURM_NTASKS_PER_NODE", "4"}, {"SLURM_NODEID", "1"}, {"SLURM_JOB_ID", "991"},
                             {"MASTER_ADDR", "n1"}, {"MASTER_PORT", "29400"}});
  EXPECT_EQ(env.rank, 6);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 2);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.group_rank, 1);
  EXPECT_EQ(env.run_id, "991");
  EXPECT_EQ(env.source, "slurm");
}

TEST(DistEnv, RankFromTheEnvironmentWinsOverSlurm) {
  const DistEnv env = parse({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"},
                             {"MASTER_ADDR", "h"}, {"MASTER_PORT", "3"}});
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 2);
}

TEST(DistEnv, MissingMasterAddrIsAConfigErrorNamingIt) {
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}}).find("MASTER_ADDR"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}).find("MASTER_PORT"),
            std::string::npos);
}

TEST(DistEnv, WorldSizeOneNeedsNoMaster) {
  EXPECT_FALSE(parse({{"RANK", "0"}, {"WORLD_SIZE", "1"}}).distributed());
}

TEST(DistEnv, InconsistentValuesAreConfigErrors) {
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}})
                .find("RANK=2 is not below WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}}).find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x'"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}})
                .find("MASTER_PORT"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"},
                      {"MASTER_PORT", "1"}})
                .find("LOCAL_WORLD_SIZE=4 exceeds"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"},
                      {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}})
                .find("LOCAL_RANK=2"),
            std::string::npos);
}

TEST(DistEnv, ParseNproc) {
  EXPECT_EQ(ft::dist::parse_nproc("3"), 3);
  EXPECT_GE(ft::dist::parse_nproc("auto"), 1);
  EXPECT_THROW(ft::dist::parse_nproc("0"), ft::ConfigError);
  EXPECT_THROW(ft::dist::parse_nproc("two"), ft::ConfigError);
}

// The built-in launcher's multi-node options, as torchrun spells them.
TEST(LaunchOptions, DefaultsAreOneNodeOnAFreePort) {
  const auto o = ft::dist::parse_node_options("", "", "", "");
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.node_rank, 0);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_EQ(o.master_port, 0);
}

TEST(LaunchOptions, SeveralNodesTakeTorchrunsDefaultPort) {
  const auto o = ft::dist::parse_node_options("2", "1", "10.0.0.1", "");
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_EQ(ft::dist::parse_node_options("2", "0", "h", "1234").master_port, 1234);
}

std::string launch_error(const std::string& nnodes, const std::string& node_rank, const std::string& addr,
                         const std::string& port) {
  try {
    ft::dist::parse_node_options(nnodes, node_rank, addr, port);
  } catch (const ft::ConfigError& e) {
    EXPECT_EQ(e.code(), ft::ExitCode::kUsage);
    return e.what();
  }
  return "(no error)";
}

TEST(LaunchOptions, BadValuesAreUsageErrorsNamingTheOption) {
  EXPECT_EQ(launch_error("2", "2", "h", ""), "--node-rank 2 is not below --nnodes 2");
  EXPECT_EQ(launch_error("", "1", "", ""), "--node-rank 1 is not below --nnodes 1");
  EXPECT_NE(launch_error("2", "1", "", "").find("--nnodes 2 needs --master-addr"), std::string::npos);
  EXPECT_EQ(launch_error("2", "0", "h", "70000"), "--master-port '70000' is not a number in 1..65535");
  EXPECT_EQ(launch_error("2", "0", "h", "0"), "--master-port '0' is not a number in 1..65535");
  EXPECT_EQ(launch_error("0", "", "h", ""), "--nnodes '0' is not a number in 1..65536");
  EXPECT_EQ(launch_error("two", "", "h", ""), "--nnodes 'two' is not a number in 1..65536");
  EXPECT_NE(launch_error("1:4", "", "h", "").find("elastic range"), std::string::npos);
  EXPECT_EQ(launch_error("2", "-1", "h", ""), "--node-rank '-1' is not a number in 0..2147483647");
}

TEST(LaunchOptions, WorkerCommandLineLosesTheLaunchersOptionsInBothSpellings) {
  const std::vector<std::string> argv = {"finetune",
                                         "train",
                                         "--nproc-per-node",
                                         "2",
                                         "--config",
                                         "c.yaml",
                                         "--nnodes=2",
                                         "--node-rank",
                                         "1",
                                         "--master-addr=10.0.0.1",
                                         "--master_port",
                                         "29400",
                                         "--nproc_per_node=2",
                                         "--node_rank=1",
                                         "--master_addr",
                                         "h",
                                         "train.max_steps=3"};
  EXPECT_EQ(ft::dist::worker_args(argv),
            (std::vector<std::string>{"train", "--config", "c.yaml", "train.max_steps=3"}));
}

}  // namespace
