// The `diloco` command line as a function: the executable's main, and the Python package's
// `python3 -m diloco` (python/), which runs the same commands with the user's learner.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "apps/commands.hpp"

namespace diloco {

namespace {

struct command {
  const char* name;
  const char* summary;
  int (*run)(int argc, const char* const* argv);
};

const command commands[] = {
    {"chaos", "goodput under failures at scale: sweep chip counts and systems (cost model)",
     run_chaos},
    {"config", "convert a cluster file of the published form to ours, saying where each key went",
     run_config_command},
    {"inspect", "list the snapshots in a directory and check every file, or show one in full",
     run_inspect},
    {"node", "run one node of a deployed cluster (the actors its cluster file places there)",
     run_node_command},
    {"report", "write a run directory's HTML report with plots (no network needed to view it)",
     run_report_command},
    {"replay",
     "re-execute actors from a recorded tape and find the first divergence; export traces",
     run_replay},
    {"simulate", "run a cluster in one process on virtual time (deterministic)", run_simulate},
    {"train", "train one learner with AdamW, no actors (the bare training loop)", run_train},
};

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: diloco <command> [options]\n\n"
               "Decoupled DiLoCo: resilient, low-communication distributed training.\n"
               "'diloco --version' prints the version.\n\n"
               "commands:\n");
  for (const auto& c : commands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\nRun 'diloco <command> --help' for the options of a command.\n");
}

}  // namespace

int run_command_line(int argc, const char* const* argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  if (name == "--version" || name == "version") {
    std::printf("diloco %s\n", DILOCO_VERSION);
    return 0;
  }
  for (const auto& c : commands) {
    if (name == c.name) return c.run(argc - 2, argv + 2);
  }
  std::vector<std::string> names;
  for (const auto& c : commands) names.emplace_back(c.name);
  const std::string near = text::nearest(name, names);
  std::fprintf(stderr, "diloco: unknown command '%s'%s\n\n", name.c_str(),
               near.empty() ? "" : (" (did you mean '" + near + "'?)").c_str());
  print_usage(stderr);
  return 2;
}

}  // namespace diloco
