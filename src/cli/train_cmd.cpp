// `finetune train --config FILE [--nproc-per-node N|auto] [--nnodes M --node-rank R --master-addr A
// [--master-port P]] [key=value ...]`.
#include <chrono>
#include <iostream>

#include "cli/commands.h"
#include "cli/device.h"
#include "config/loader.h"
#include "dist/comm.h"
#include "dist/env.h"
#include "dist/launcher.h"
#include "train/build.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/fmt.h"
#include "util/signals.h"

namespace ft::cli {
namespace {

struct TrainOptions {
  std::string config;                  // YAML file
  std::string nproc_per_node;          // empty = this process is the (only) worker
  std::string nnodes, node_rank;       // the built-in launcher on several nodes, as torchrun spells it
  std::string master_addr, master_port;
  std::vector<std::string> overrides;  // key=value
  bool overwrite = false;              // --overwrite: run.overwrite=true
};

int run_train(const TrainOptions& options, const Globals& globals) {
  // The launcher's options first, also where they go unused (in a worker): a typo fails at once, with exit code 2.
  dist::LaunchOptions launch =
      dist::parse_node_options(options.nnodes, options.node_rank, options.master_addr, options.master_port);
  // Load and validate before anything starts, so a bad config fails once, with exit code 2.
  std::vector<std::string> overrides = options.overrides;
  if (options.overwrite) overrides.emplace_back("run.overwrite=true");
  auto loaded = config::load_config(options.config, overrides);
  Config& cfg = loaded.config;
  const std::string level_name = globals.log_level.empty() ? name_of(cfg.logging.level) : globals.log_level;
  const auto env = dist::read_env();
  log::init(log::parse_level(level_name).value_or(log::Level::kInfo), env.rank, env.world_size);

  if (!env.distributed()) {
    const int nproc = options.nproc_per_node.empty() ? 1 : dist::parse_nproc(options.nproc_per_node);
    if (nproc > 1 || launch.nnodes > 1) {
      launch.timeout = std::chrono::seconds(cfg.distributed.timeout_s);
      return dist::launch_local(nproc, dist::worker_args(globals.argv), launch);
    }
  }
  train::RunContext ctx;
  ctx.rank = env.rank;
  ctx.world_size = env.world_size;
  ctx.device = resolve_device(cfg.run.device, env.local_rank);
  ctx.comm = dist::make_communicator(env, name_of(cfg.distributed.backend), ctx.device,
                                     std::chrono::seconds(cfg.distributed.timeout_s));
  if (env.distributed()) FT_LOG_INFO("distributed: {} over {}", dist::describe(env), ctx.comm->backend());
  // SIGINT/SIGTERM from here on stop the run gracefully: one seen during setup stops it after the first step.
  signals::install();
  // Generated data and a trained tokenizer get their paths in the config; from here on it is frozen.
  train::PreparedRun prepared = train::prepare_run(cfg, ctx);
  // The earlier run is set aside now; config.yaml must not delete this one when it is run again to resume.
  cfg.run.overwrite = false;
  // config.yaml is written once the run is accepted: a refused resume leaves the run directory as it was.
  train::Trainer trainer(cfg, ctx, [&] { config::write_resolved_config(loaded, cfg.run.output_dir); });
  // An earlier run set aside by run.overwrite goes for good once this one has trained a step; a failure or a stop
  // before that puts it back (PreparedRun's destructor).
  return static_cast<int>(trainer.run([&] { prepared.earlier_run.commit(); }));
}

}  // namespace

void add_train(CLI::App& app, const Globals& globals, int& exit_code) {
  auto* sub = app.add_subcommand("train", "Fine-tune (or train from scratch) as the config says");
  sub->footer(
      "Examples:\n"
      "  finetune train --config configs/demo.yaml                  # or: finetune train configs/demo.yaml\n"
      "  finetune train --config my.yaml optimizer.lr=1e-4 train.max_steps=100\n"
      "  finetune train --config my.yaml --overwrite                # delete the earlier run there, start again\n"
      "  finetune train --config my.yaml --nproc-per-node auto      # one worker per GPU\n"
      "  finetune train --config my.yaml --nproc-per-node 8 --nnodes 2 --node-rank 0 --master-addr 10.0.0.1\n"
      "                                                             # node 0 of 2 (node 1: --node-rank 1)\n"
      "  torchrun --nproc-per-node 8 --no-python finetune train --config my.yaml\n"
      "Exit codes: 0 done, 1 failure, 2 bad config or usage, 130 stopped by a signal (checkpoint written).");
  auto options = std::make_shared<TrainOptions>();
  add_config_arguments(*sub, options->config, options->overrides);
  sub->add_option("--nproc-per-node,--nproc_per_node", options->nproc_per_node,
                  "Start N local worker processes (or 'auto': one per visible GPU), like torchrun");
  sub->add_option("--nnodes", options->nnodes,
                  "Nodes in the run, each running this command with its own --node-rank (default 1)");
  sub->add_option("--node-rank,--node_rank", options->node_rank,
                  "This node's index, 0 .. nnodes-1; node 0 hosts the rendezvous store (default 0)");
  sub->add_option("--master-addr,--master_addr", options->master_addr,
                  "Node 0's address, the same on every node; required with --nnodes > 1 (one node: 127.0.0.1)");
  sub->add_option("--master-port,--master_port", options->master_port,
                  "The store's TCP port on node 0, the same on every node (default 29500; one node: a free port)");
  sub->add_flag("--overwrite", options->overwrite,
                "Delete an earlier run in run.output_dir and start again (as run.overwrite=true); without it a run "
                "that would start at step 0 refuses a directory that holds one");
  sub->callback([options, &globals, &exit_code] { exit_code = run_train(*options, globals); });
}

}  // namespace ft::cli
