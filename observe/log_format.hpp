// How the command line writes to stderr: plain lines (the default), or with --log-format json
// one JSON object per line, for log collectors: {"time": ISO 8601 UTC with milliseconds,
// "level", "node" (a deployed node's name), "run" (the run's identity), "msg"}. Log messages, a
// node's events, progress lines and errors all go through here, so a JSON stderr holds nothing
// else. The results a command prints on stdout stay text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace spdlog {
class formatter;
}

namespace diloco {

enum class log_format { text, json };

// The process's format (set once per command; the Python package runs commands again).
void set_log_format(log_format f);
log_format current_log_format();
// The node and the run (its identity, hex) named in each JSON line ("": none).
void set_log_node(const std::string& node);
void set_log_run(uint64_t run_id);  // 0: none

// One line on stderr at `level` ("info", "warn", "error"): `text` as it is, or as a JSON
// object in JSON mode.
void log_line(const char* level, const std::string& text);

// spdlog's lines as JSON objects.
std::unique_ptr<spdlog::formatter> json_log_formatter();

}  // namespace diloco
