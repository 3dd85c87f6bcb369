// The subcommands of the `diloco` executable. Each parses its own arguments (after the
// subcommand name), prints --help, and returns the process exit code: 0 success, 1 the job
// failed, 2 bad usage or input.
#pragma once

#include <functional>
#include <string>

#include "base/status.hpp"

#include "apps/cli.hpp"

namespace diloco {

// The whole command line: argv[0] the program, argv[1] the subcommand.
int run_command_line(int argc, const char* const* argv);

int run_train(int argc, const char* const* argv);
int run_simulate(int argc, const char* const* argv);
struct sim_result;
// `diloco simulate` as the command line runs it (its output, run directory, snapshots, tape,
// --compare, --save-model), handing each system's result to `take` (the main run first, then
// the baselines) before it returns its exit code: the Python package's diloco.simulate().
using simulate_take = std::function<void(const std::string& system, const sim_result& result)>;
int run_simulate(int argc, const char* const* argv, const simulate_take& take);
int run_chaos(int argc, const char* const* argv);
int run_inspect(int argc, const char* const* argv);
int run_replay(int argc, const char* const* argv);
int run_node_command(int argc, const char* const* argv);
int run_report_command(int argc, const char* const* argv);
int run_config_command(int argc, const char* const* argv);

// Options every subcommand takes.
struct common_options {
  std::string log_level = "info";
  std::string log_format = "text";  // observe/log_format.hpp
};
void add_common_options(cli::arg_parser& parser, common_options& options);
// Applies them (spdlog level); a bad level is reported and returns false.
bool apply_common_options(const common_options& options);

// `--tape-max-bytes`: its help, and whether its value (with the tape it bounds) is usable.
extern const char* const tape_max_bytes_help;
status check_tape_max_bytes(double bytes, const std::string& tape);

// Prints a failed status for the user and returns the exit code for it.
int report_error(const std::string& command, const status& st);
// The text report_error printed last ("" if none since the last call): for a caller that turns
// a command's failure into an exception (the Python package).
std::string take_last_error();

// Called once `diloco node` has reported its outcome (with its exit code), before its actor
// system shuts down: the Python package ends an island's other ranks there, since a CAF 0.17
// shutdown that hangs ends the process without returning (apps/cmd_node.cpp).
void set_node_reported_hook(std::function<void(int exit_code)> hook);
void node_reported(int exit_code);

}  // namespace diloco
