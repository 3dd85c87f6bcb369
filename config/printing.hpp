// The configuration as text for people: a few lines that say what will run, and every key with
// its value as a YAML cluster file that loads back to the same configuration (what
// `--print-config` shows and what snapshots and tapes record).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/config.hpp"

namespace diloco {

// A text as a YAML scalar that reads back as the same text: plain when it can be, double-quoted
// with escapes otherwise. Every string a generated cluster file holds goes through it.
std::string yaml_scalar(const std::string& text);
// A text for a YAML comment: one line (control characters shown as spaces).
std::string yaml_comment_text(const std::string& text);

// A few lines that say what will run.
std::string describe_run(const run_config& config);
// Every key with its value, as a YAML cluster file (it loads back to the same config).
std::string config_as_yaml(const run_config& config);
// Every setting as (name, value) in the printed file's order: nested keys as "inner.lr", list
// entries as "failures[0].at_s" (what a report compares between runs).
std::vector<std::pair<std::string, std::string>> config_settings(const run_config& config);

}  // namespace diloco
