// `diloco report RUN_DIR...`: a self-contained HTML report of one or more run directories
// (observe/monitor.hpp writes them). The page carries its data as JSON and draws it with uPlot
// (third_party/uplot, inlined with its licence when the program is built), so it opens
// offline from a file: zoom by dragging, values on hover, series toggled from the legend.
// The data are prepared here (report_data): binned curves per system, per learner, per
// merge, the timeline of each learner, the alerts; the page's script (observe/report_page.js)
// only draws. Several run directories go onto the same axes, their series named RUN/system.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.hpp"

namespace diloco {

struct report_result {
  std::string path;  // the HTML file written
  int views = 0;     // charts on the page
  int systems = 0;   // over all runs
  int runs = 0;
};

// What the page draws, for every finished system of every run directory (a JSON object:
// {"runs": [...], "systems": [...]}). Errors name the file and what is wrong in it.
result<std::string> report_data(const std::vector<std::string>& run_dirs);

// Writes the page: to `out`, or RUN_DIR/report.html for one run, or
// FIRST_RUN_DIR/report-compare.html for several.
result<report_result> write_report(const std::vector<std::string>& run_dirs,
                                   const std::string& out = "");

// The names of the views the page draws (the ids of their elements), in page order; a run with
// adaptive inner steps has one more after "bandwidth", "period" (the H its learners followed).
const std::vector<std::string>& report_views();

}  // namespace diloco
