#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <functional>
#include <mutex>
#include <sstream>
#include <utility>

#include "apps/commands.hpp"
#include "observe/log_format.hpp"

namespace diloco {

void add_common_options(cli::arg_parser& parser, common_options& options) {
  parser.option("log-level", &options.log_level,
                "log verbosity: trace, debug, info, warn, error or off");
  parser.option("log-format", &options.log_format,
                "text, or json: every stderr line one JSON object (time, level, node, msg)");
}

bool apply_common_options(const common_options& options) {
  const auto level = spdlog::level::from_str(options.log_level);
  // from_str maps unknown names to "off"; only the word "off" may mean off.
  if (level == spdlog::level::off && options.log_level != "off") {
    std::fprintf(stderr, "--log-level: '%s' is not one of trace, debug, info, warn, error, off\n",
                 options.log_level.c_str());
    return false;
  }
  if (options.log_format != "text" && options.log_format != "json") {
    std::fprintf(stderr, "--log-format: '%s' is not text or json\n", options.log_format.c_str());
    return false;
  }
  const bool json = options.log_format == "json";
  set_log_format(json ? log_format::json : log_format::text);
  set_log_node("");
  set_log_run(0);
  // Made once per process: the Python package runs commands in the same process again.
  auto logger = spdlog::get("diloco");
  if (!logger) logger = spdlog::stderr_color_mt("diloco");
  if (json) {
    logger->set_formatter(json_log_formatter());
  } else {
    logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  }
  spdlog::set_default_logger(logger);
  spdlog::set_level(level);
  return true;
}

namespace {
std::string& last_error() {
  static std::string text;
  return text;
}
}  // namespace

namespace {
std::mutex& hook_mutex() {
  static std::mutex mu;
  return mu;
}
std::function<void(int)>& reported_hook() {
  static std::function<void(int)> hook;
  return hook;
}
}  // namespace

void set_node_reported_hook(std::function<void(int)> hook) {
  std::lock_guard<std::mutex> g(hook_mutex());
  reported_hook() = std::move(hook);
}

void node_reported(int exit_code) {
  std::function<void(int)> hook;
  {
    std::lock_guard<std::mutex> g(hook_mutex());
    hook = reported_hook();
  }
  if (hook) hook(exit_code);
}

std::string take_last_error() {
  return std::exchange(last_error(), std::string());
}

int report_error(const std::string& command, const status& st) {
  // One line per error (a parse reports every mistake at once), each naming the command once.
  std::istringstream lines(st.message());
  std::string& kept = last_error();
  kept.clear();
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(command + ": ", 0) == 0) line.erase(0, command.size() + 2);
    log_line("error", command + ": " + line);
    kept += (kept.empty() ? "" : "\n") + command + ": " + line;
  }
  return st.code() == errc::invalid_argument || st.code() == errc::not_found ||
                 st.code() == errc::corrupt_data
             ? 2
             : 1;
}

const char* const tape_max_bytes_help =
    "keep the newest this many bytes of tape (e.g. 2e9): the tape rotates through 4 volumes "
    "(TAPE.vN.tape beside the first) and replay begins at the oldest kept (0: no bound)";

status check_tape_max_bytes(double bytes, const std::string& tape) {
  if (!(bytes == 0 || (bytes >= 1e6 && bytes <= 1e15)))
    return status(errc::invalid_argument,
                  "--tape-max-bytes: must be 0 (no bound) or from 1e6 to 1e15 bytes");
  if (bytes > 0 && tape.empty())
    return status(errc::invalid_argument, "--tape-max-bytes: needs --tape");
  return ok_status();
}

}  // namespace diloco
