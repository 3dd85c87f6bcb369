// `diloco report RUN_DIR`: the HTML report of a run directory (apps/report.hpp).
#include <cstdio>

#include "apps/commands.hpp"
#include "apps/report.hpp"

namespace diloco {

int run_report_command(int argc, const char* const* argv) {
  std::string dir, out;
  common_options common;
  cli::arg_parser p("diloco report",
                    "Writes RUN_DIR/report.html: a self-contained page (no network needed)\n"
                    "with the run's summary and plots: loss vs tokens with the baselines and\n"
                    "the entropy rate, goodput and uptime, a timeline per learner, token\n"
                    "shares per merge, bytes per learner. RUN_DIR is what `diloco simulate\n"
                    "--run-dir` or `diloco node --run-dir` wrote.");
  p.positional("RUN_DIR", &dir, "the run directory");
  p.option("out", &out, "write the report here instead of RUN_DIR/report.html");
  add_common_options(p, common);
  if (auto st = p.parse(argc, argv); !st.ok()) return report_error("diloco report", st);
  if (p.help_requested()) {
    std::fputs(p.help().c_str(), stdout);
    return 0;
  }
  if (!apply_common_options(common)) return 2;
  auto r = write_report(dir, out);
  if (!r) return report_error("diloco report", r.error());
  std::printf("report written: %s (%d plots, %d systems)\n", r->path.c_str(), r->plots, r->systems);
  return 0;
}

}  // namespace diloco
