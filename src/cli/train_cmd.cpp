// `finetune train --config FILE [--nproc-per-node N|auto] [key=value ...]`.
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
  std::vector<std::string> overrides;  // key=value
  bool overwrite = false;              // --overwrite: run.overwrite=true
};

// The command line without --nproc-per-node, for the workers the launcher starts.
std::vector<std::string> worker_args(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  for (size_t i = 1; i < argv.size(); ++i) {
    if (argv[i] == "--nproc-per-node") {
      ++i;
      continue;
    }
    if (argv[i].rfind("--nproc-per-node=", 0) == 0) continue;
    out.push_back(argv[i]);
  }
  return out;
}

int run_train(const TrainOptions& options, const Globals& globals) {
  // Load and validate before anything starts, so a bad config fails once, with exit code 2.
  std::vector<std::string> overrides = options.overrides;
  if (options.overwrite) overrides.emplace_back("run.overwrite=true");
  auto loaded = config::load_config(options.config, overrides);
  Config& cfg = loaded.config;
  const std::string level_name = globals.log_level.empty() ? name_of(cfg.logging.level) : globals.log_level;
  const auto env = dist::read_env();
  log::init(log::parse_level(level_name).value_or(log::Level::kInfo), env.rank, env.world_size);

  if (!options.nproc_per_node.empty() && !env.distributed()) {
    const int nproc = dist::parse_nproc(options.nproc_per_node);
    if (nproc > 1) return dist::launch_local(nproc, worker_args(globals.argv));
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
  train::prepare_run(cfg, ctx);
  // The earlier run is gone now; config.yaml must not delete this one when it is run again to resume.
  cfg.run.overwrite = false;
  // config.yaml is written once the run is accepted: a refused resume leaves the run directory as it was.
  train::Trainer trainer(cfg, ctx, [&] { config::write_resolved_config(loaded, cfg.run.output_dir); });
  return static_cast<int>(trainer.run());
}

}  // namespace

void add_train(CLI::App& app, const Globals& globals, int& exit_code) {
  auto* sub = app.add_subcommand("train", "Fine-tune (or train from scratch) as the config says");
  sub->footer(
      "Examples:\n"
      "  finetune train --config configs/demo.yaml\n"
      "  finetune train --config my.yaml optimizer.lr=1e-4 train.max_steps=100\n"
      "  finetune train --config my.yaml --overwrite                # delete the earlier run there, start again\n"
      "  finetune train --config my.yaml --nproc-per-node auto      # one worker per GPU\n"
      "  torchrun --nproc-per-node 8 --no-python finetune train --config my.yaml\n"
      "Exit codes: 0 done, 1 failure, 2 bad config or usage, 130 stopped by a signal (checkpoint written).");
  auto options = std::make_shared<TrainOptions>();
  sub->add_option("--config,-c", options->config, "YAML config file")->required()->check(CLI::ExistingFile);
  sub->add_option("--nproc-per-node", options->nproc_per_node,
                  "Start N local worker processes (or 'auto': one per visible GPU), like torchrun");
  sub->add_flag("--overwrite", options->overwrite,
                "Delete an earlier run in run.output_dir and start again (as run.overwrite=true); without it a run "
                "that would start at step 0 refuses a directory that holds one");
  sub->add_option("overrides", options->overrides, "Config overrides key=value (value parsed as YAML)");
  sub->callback([options, &globals, &exit_code] { exit_code = run_train(*options, globals); });
}

}  // namespace ft::cli
