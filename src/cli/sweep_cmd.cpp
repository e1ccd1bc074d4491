// `finetune sweep [--config] BASE [--sweep] SWEEP [key=value ...]`: a grid, list or random sweep over the base config,
// each trial a `finetune train` run in <sweep dir>/<trial name>/ (src/sweep, docs/sweeps.md).
#include <iostream>

#include "cli/commands.h"
#include "sweep/plan.h"
#include "sweep/runner.h"
#include "sweep/summary.h"
#include "util/error.h"

namespace ft::cli {
namespace {

struct SweepOptions {
  std::string config;
  std::string sweep;
  std::vector<std::string> overrides;
  std::string out;
  std::string status;
  bool list = false;
  int index = -1;
  bool summarize = false;
  bool retry_failed = false;
};

std::string values_text(const sweep::Trial& t) {
  std::string s;
  for (const auto& a : t.values) s += (s.empty() ? "" : " ") + a.key + "=" + a.yaml;
  return s;
}

bool all_done(const std::vector<sweep::Row>& rows) {
  for (const auto& r : rows) {
    if (!sweep::done(r.status)) return false;
  }
  return true;
}

int run_sweep_command(const SweepOptions& o, const Globals& globals, bool index_given) {
  if (!o.status.empty()) {
    const std::filesystem::path dir(o.status);
    const auto record = sweep::read_record(dir);
    const auto rows = sweep::collect_rows(dir, record);
    std::cout << sweep::render_markdown(dir, record, rows, false);
    return 0;
  }
  // As `finetune train FILE`: the base config and then the sweep file may come as the first arguments (an
  // override has a '=').
  std::string config = o.config, sweep_file = o.sweep;
  std::vector<std::string> overrides = o.overrides;
  for (std::string* file : {&config, &sweep_file}) {
    if (file->empty() && !overrides.empty() && overrides.front().find('=') == std::string::npos) {
      *file = overrides.front();
      overrides.erase(overrides.begin());
    }
  }
  if (config.empty() || sweep_file.empty()) {
    throw ConfigError("finetune sweep needs a base config and a sweep file (or --status DIR)",
                      "e.g. finetune sweep configs/demo.yaml configs/demo-sweep.yaml, or with --config and --sweep");
  }
  sweep::PlanOptions po;
  po.base_config = config;
  po.sweep_file = sweep_file;
  po.overrides = overrides;
  po.out_dir = o.out;
  po.validate = !o.summarize;
  const sweep::Plan plan = sweep::make_plan(po);

  if (o.list) {
    for (const auto& t : plan.trials) {
      std::cout << t.trial.index << '\t' << t.trial.name << '\t' << values_text(t.trial) << '\n';
    }
    return 0;
  }
  if (o.summarize) {
    std::error_code ec;
    if (!std::filesystem::is_directory(plan.dir, ec)) {
      throw ConfigError("the sweep directory '" + plan.dir.string() + "' does not exist",
                        "run the sweep (or its --index tasks) first, with the same --config, --sweep and --out");
    }
    const auto record = sweep::record_of(plan);
    sweep::write_record(plan.dir, record);
    const auto files = sweep::write_summary(plan.dir, record);
    const auto rows = sweep::collect_rows(plan.dir, record);
    std::cout << sweep::render_markdown(plan.dir, record, rows, false);
    std::cerr << "finetune sweep: wrote " << files.markdown.string() << ", " << files.csv.filename().string()
              << (files.png.empty() ? "" : ", " + files.png.filename().string()) << "\n";
    return all_done(rows) ? 0 : 1;
  }
  sweep::RunOptions ro;
  ro.retry_failed = o.retry_failed;
  ro.log_level = globals.log_level;
  if (index_given) ro.index = o.index;
  return sweep::run_sweep(plan, ro);
}

}  // namespace

void add_sweep(CLI::App& app, const Globals& globals, int& exit_code) {
  auto* sub = app.add_subcommand("sweep", "Run a grid, list or random sweep of training runs over a base config");
  sub->footer(
      "Examples:\n"
      "  finetune sweep configs/demo.yaml configs/demo-sweep.yaml     # = --config BASE --sweep FILE\n"
      "  finetune sweep --config base.yaml --sweep sweep.yaml --list             # index, name, values\n"
      "  finetune sweep --config base.yaml --sweep sweep.yaml --index $SLURM_ARRAY_TASK_ID\n"
      "  finetune sweep --config base.yaml --sweep sweep.yaml --summarize        # after the array tasks\n"
      "  finetune sweep --status runs/demo-sweep\n"
      "Running the same command again skips finished trials and resumes interrupted ones; --retry-failed also\n"
      "reruns failed ones. docs/sweeps.md describes the sweep file.\n"
      "Exit codes: 0 every trial finished, 1 a trial failed or is unfinished, 2 bad sweep file or trial config\n"
      "(nothing started), 130 stopped by a signal (trials checkpointed; rerun to resume).");
  auto options = std::make_shared<SweepOptions>();
  sub->add_option("--config,-c", options->config, "Base YAML config of every trial (or the first argument)")
      ->check(CLI::ExistingFile);
  sub->add_option("--sweep,-s", options->sweep,
                  "Sweep file: grid, list, random, name, metric, ... (or the argument after the base config)");
  sub->add_option("--out,-o", options->out,
                  "Sweep directory (default: the sweep file's output_dir, else runs/<sweep file name>)");
  auto* list = sub->add_flag("--list", options->list, "Print the trials (index, name, values) and exit");
  auto* index = sub->add_option("--index", options->index, "Run trial I alone (Slurm array / Indexed Job index)")
                    ->check(CLI::NonNegativeNumber);
  auto* summarize = sub->add_flag("--summarize", options->summarize,
                                  "Write summary.md/.csv/.png from the sweep directory without running anything");
  auto* status = sub->add_option("--status", options->status, "Print the table of the sweep in DIR and exit");
  sub->add_flag("--retry-failed", options->retry_failed, "Also rerun trials that failed before");
  sub->add_option("overrides", options->overrides, "[BASE] [SWEEP] then config overrides key=value for every trial");
  list->excludes(index)->excludes(summarize)->excludes(status);
  index->excludes(summarize)->excludes(status);
  summarize->excludes(status);
  sub->callback(
      [options, index, &globals, &exit_code] { exit_code = run_sweep_command(*options, globals, index->count() > 0); });
}

}  // namespace ft::cli
