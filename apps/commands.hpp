// The subcommands of the `diloco` executable. Each parses its own arguments (after the
// subcommand name), prints --help, and returns the process exit code: 0 success, 1 the job
// failed, 2 bad usage or input.
#pragma once

#include <string>

#include "base/status.hpp"

#include "apps/cli.hpp"

namespace diloco {

// The whole command line: argv[0] the program, argv[1] the subcommand.
int run_command_line(int argc, const char* const* argv);

int run_train(int argc, const char* const* argv);
int run_simulate(int argc, const char* const* argv);
int run_chaos(int argc, const char* const* argv);
int run_inspect(int argc, const char* const* argv);
int run_replay(int argc, const char* const* argv);
int run_node_command(int argc, const char* const* argv);
int run_report_command(int argc, const char* const* argv);
int run_config_command(int argc, const char* const* argv);

// Options every subcommand takes.
struct common_options {
  std::string log_level = "info";
};
void add_common_options(cli::arg_parser& parser, common_options& options);
// Applies them (spdlog level); a bad level is reported and returns false.
bool apply_common_options(const common_options& options);

// `--tape-max-bytes`: its help, and whether its value (with the tape it bounds) is usable.
extern const char* const tape_max_bytes_help;
status check_tape_max_bytes(double bytes, const std::string& tape);

// Prints a failed status for the user and returns the exit code for it.
int report_error(const std::string& command, const status& st);

}  // namespace diloco
