// `finetune plot RUN_DIR [--out FILE]`: a PNG, SVG or PDF of the loss, learning-rate and throughput curves of a run.
#include <iostream>

#include "cli/commands.h"
#include "metrics/plot.h"
#include "util/error.h"

namespace ft::cli {

void add_plot(CLI::App& app, const Globals& /*globals*/, int& exit_code) {
  auto* sub =
      app.add_subcommand("plot", "Draw the loss, learning-rate and tokens/s curves of a run into a PNG, SVG or PDF");
  sub->footer(
      "The format follows the file name: .png an image, .svg or .pdf vector graphics (for documents); any other\n"
      "name is refused (exit code 2). A loss that falls by more than 10x is drawn on a log axis (the axis says\n"
      "so); eval losses are ringed red dots on top of the train line; the tokens/s axis starts at zero.\n"
      "Examples:\n  finetune plot runs/demo\n  finetune plot runs/demo --out runs/demo/curves.svg\n"
      "  finetune plot runs/demo --out runs/demo/curves.pdf");
  auto run_dir = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  sub->add_option("RUN_DIR", *run_dir, "Run directory holding metrics.jsonl")->required();
  sub->add_option("--out", *out, "File to write: .png, .svg or .pdf (default: RUN_DIR/plot.png)");
  sub->callback([run_dir, out, &exit_code] {
    const std::filesystem::path dir(*run_dir);
    if (!std::filesystem::is_directory(dir))
      throw ConfigError("plot: '" + *run_dir + "' is not a directory", "pass the run directory, e.g. runs/demo");
    const std::filesystem::path file = out->empty() ? dir / "plot.png" : std::filesystem::path(*out);
    metrics::chart_format(file);  // an extension it cannot write: exit 2 before anything is read
    const auto series = metrics::read_metric_series(dir / "metrics.jsonl");
    std::string name = dir.lexically_normal().string();
    while (name.size() > 1 && name.back() == '/') name.pop_back();  // "runs/demo/" names the run "demo"
    const auto info =
        metrics::plot_metrics(series, file, "finetune run: " + std::filesystem::path(name).filename().string());
    std::cout << "wrote " << file.string() << " (" << info.width << "x" << info.height << ", " << info.points
              << " points)\n";
    exit_code = 0;
  });
}

}  // namespace ft::cli
