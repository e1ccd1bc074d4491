// plot.h in a build without cairo (FT_WITH_CAIRO=OFF, e.g. an offline host without its libraries): the charts
// fail with an error that says how to get them.
#include "metrics/plot.h"
#include "util/error.h"

namespace ft::metrics {
namespace {

[[noreturn]] void no_plotting() {
  throw Error("this build has no plotting (built without cairo)",
              "rebuild with libcairo2-dev installed (scripts/setup.sh installs it) and FT_WITH_CAIRO=ON");
}

}  // namespace

bool plotting_available() {
  return false;
}

PlotInfo plot_metrics(const MetricSeries& /*series*/, const std::filesystem::path& /*out*/,
                      const std::string& /*title*/) {
  no_plotting();
}

PlotInfo plot_comparison(const std::vector<LabeledSeries>& /*runs*/, const std::filesystem::path& /*out*/,
                         const std::string& /*title*/) {
  no_plotting();
}

}  // namespace ft::metrics
