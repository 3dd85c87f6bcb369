// Command-line options that describe a run, shared by the commands that run clusters.
// Precedence: the built-in cluster, then the YAML file (--cluster), then flags in their order.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "apps/cli.hpp"
#include "apps/commands.hpp"
#include "runtime/config.hpp"

namespace diloco {

struct run_options {
  std::string cluster_file;
  std::vector<std::pair<std::string, std::string>> sets;  // key, value; in command-line order
  std::string compare;
  bool print_config = false;
  common_options common;
};

void bind_run_options(cli::arg_parser& parser, run_options& options);

struct monitor_options;  // observe/monitor.hpp
// --run-dir, --metrics-port, --metrics-host, --metrics-linger.
void bind_monitor_options(cli::arg_parser& parser, monitor_options& options);

// One `--set KEY=VALUE`, appended to `sets`; no '=' (or no key) is an error.
status add_set_flag(const std::string& text,
                    std::vector<std::pair<std::string, std::string>>& sets);

// The run's config from --cluster and the flags (config/resolve.hpp's resolve_config): built-in
// defaults, the file, the flags; validated, derived values set. With a base (a resumed
// snapshot's configuration), flags apply on top of it instead of the built-in cluster, unless a
// file is given.
result<run_config> resolve_run_options(const run_options& options,
                                       const run_config* base = nullptr);

// "dp,diloco" -> {"dp", "diloco"}; unknown names are errors.
result<std::vector<std::string>> parse_compare_list(const std::string& text);

}  // namespace diloco
