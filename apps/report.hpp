// `diloco report RUN_DIR`: a self-contained HTML report of a run directory (apps/monitor.hpp
// writes it): summary table and SVG plots drawn here, no scripts, nothing fetched.
// Plots: train loss vs tokens per system with the eval losses and the data's entropy rate;
// goodput and uptime over time; a timeline per learner (computing, idle, down, merged sends);
// token-weight shares per merge; bytes on the wire per learner. Every plot is an <svg
// class="plot" id=...> whose data lines are <path class="series" data-name=...> (or <rect
// class="series">), so a test can check what rendered.
#pragma once

#include <string>

#include "base/status.hpp"

namespace diloco {

struct report_result {
  std::string path;  // the HTML file written
  int plots = 0;
  int systems = 0;
};

// Reads RUN_DIR/summary.json and the metrics files it names; writes RUN_DIR/report.html (or
// `out` when not empty). Errors name the file and what is wrong in it.
result<report_result> write_report(const std::string& run_dir, const std::string& out = "");

}  // namespace diloco
