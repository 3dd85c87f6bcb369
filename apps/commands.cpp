// The `diloco` command line as a function: the executable's main, and the Python package's
// `python3 -m diloco` (python/), which runs the same commands with the user's learner.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/manual.hpp"

namespace diloco {

namespace {

struct command {
  const char* name;
  const char* summary;
  int (*run)(int argc, const char* const* argv);
};

int run_manpage(int argc, const char* const* argv);
int run_completion(int argc, const char* const* argv);

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
    {"manpage", "print the manual page (roff): diloco manpage | man -l -", run_manpage},
    {"completion", "print the bash completion: source <(diloco completion bash)", run_completion},
};

constexpr const char* program_summary =
    "Decoupled DiLoCo: resilient, low-communication distributed training.";

// Every command's name, summary and --help text.
std::vector<command_help> all_help() {
  std::vector<command_help> out;
  for (const auto& c : commands) {
    const char* argv[] = {"--help"};
    const std::string help = capture_stdout([&] { c.run(1, argv); });
    out.push_back({c.name, c.summary, help});
  }
  return out;
}

// A command that takes no argument but --help: its parser, or the exit code when it is done.
int no_arguments(const char* name, const char* summary, int argc, const char* const* argv) {
  cli::arg_parser p(std::string("diloco ") + name, summary);
  if (auto st = p.parse(argc, argv); !st.ok())
    return report_error(std::string("diloco ") + name, st);
  if (p.help_requested()) {
    std::fputs(p.help().c_str(), stdout);
    return 0;
  }
  return -1;
}

int run_manpage(int argc, const char* const* argv) {
  const int done = no_arguments("manpage",
                                "Prints the manual page of diloco in roff, made from every "
                                "command's --help (the package installs it as diloco(1)).",
                                argc, argv);
  if (done >= 0) return done;
  std::fputs(manual_page(DILOCO_VERSION, program_summary, all_help()).c_str(), stdout);
  return 0;
}

int run_completion(int argc, const char* const* argv) {
  if (argc >= 1 && std::strcmp(argv[0], "bash") == 0) ++argv, --argc;
  const int done = no_arguments("completion",
                                "Prints a bash completion script for diloco: its commands, "
                                "each command's options, and a few options' values (the "
                                "package installs it). Usage: diloco completion bash.",
                                argc, argv);
  if (done >= 0) return done;
  std::fputs(bash_completion(all_help()).c_str(), stdout);
  return 0;
}

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: diloco <command> [options]\n\n"
               "%s\n"
               "'diloco --version' prints the version.\n\n"
               "commands:\n",
               program_summary);
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
