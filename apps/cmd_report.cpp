// `diloco report RUN_DIR...`: the HTML report of one or more run directories (observe/report.hpp).
#include <cstdio>

#include "apps/commands.hpp"
#include "observe/report.hpp"

namespace diloco {

int run_report_command(int argc, const char* const* argv) {
  std::vector<std::string> dirs;
  std::string out;
  common_options common;
  cli::arg_parser p(
      "diloco report",
      "Writes a self-contained page (it opens offline, from the file) with the runs' summary\n"
      "and interactive charts: train loss (per system and per learner, against tokens or time,\n"
      "linear or log), eval loss over the run, goodput and uptime, throughput, the inner\n"
      "learning rate, staleness of merged deltas, arrival delays per learner, bytes and\n"
      "bandwidth, compression, a timeline of every learner, token shares, and the alerts,\n"
      "marked where they fired. RUN_DIR is what `diloco simulate --run-dir` or `diloco node\n"
      "--run-dir` wrote; with several, their series share the axes (named RUN/system).\n"
      "Writes RUN_DIR/report.html, or FIRST_RUN_DIR/report-compare.html for several runs.");
  p.positional_list("RUN_DIR", &dirs, "run directories (one or more)");
  p.option("out", &out, "write the report here instead");
  add_common_options(p, common);
  if (auto st = p.parse(argc, argv); !st.ok()) return report_error("diloco report", st);
  if (p.help_requested()) {
    std::fputs(p.help().c_str(), stdout);
    return 0;
  }
  if (!apply_common_options(common)) return 2;
  auto r = write_report(dirs, out);
  if (!r) return report_error("diloco report", r.error());
  std::printf("report written: %s (%d views, %d systems from %d run%s)\n", r->path.c_str(),
              r->views, r->systems, r->runs, r->runs == 1 ? "" : "s");
  return 0;
}

}  // namespace diloco
