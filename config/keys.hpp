// Every key of a run: its dotted name (as in the YAML cluster file and `--set key=value`), its
// help text, and how to set it from text. One table, so the file and the command line name
// things the same way and report bad values the same way.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/config.hpp"

namespace diloco {

struct config_key {
  std::string name;  // e.g. "inner.lr"
  std::string help;
  std::function<status(run_config&, const std::string&)> set;
  std::function<std::string(const run_config&)> get;
  // For keys whose value is free text (paths, names, lists as text): the value itself, as
  // `set` takes it, which printing quotes as YAML needs (config/printing.cpp). `get` stays as
  // it was: a run's identity hashes its text.
  std::function<std::string(const run_config&)> text;
  // Printed (and so part of a run's identity) only when set: a key added after runs were
  // recorded leaves their identities, and so their snapshots and tapes, valid.
  bool only_when_set = false;
};

// The scalar keys, in documentation order. Lists (speeds, failures) are handled by the file
// loader and by `--set speeds=...` / `--set failures=...` in their compact text forms.
const std::vector<config_key>& run_config_keys();

// Sets one key from text; unknown keys and bad values give an error naming the key.
status set_config_key(run_config& config, const std::string& key, const std::string& value);

// The shortest text that reads back as the same double.
std::string format_exact(double v);

// The closest known key to a misspelt one, or "" when nothing is close.
std::string suggest_key(const std::string& key);

// Compact list forms: speeds "1.0,1.18:0.1,..." (slowdown[:jitter] per learner) and failures
// "learner@at_s+down_s,...".
status parse_speeds(run_config& config, const std::string& text);
status parse_failures(run_config& config, const std::string& text);
// Partitions "1,2@300+60;3@500+30": learners@at_s+heal_s, entries separated by ';'.
status parse_partitions(run_config& config, const std::string& text);
// Nodes "a@10.0.0.1:4400,b@10.0.0.2:4400": name@host:port.
status parse_nodes(run_config& config, const std::string& text);
// Membership "+4@300,-1@500": learner 4 joins at 300 s, learner 1 leaves at 500 s.
status parse_membership(run_config& config, const std::string& text);
// Link changes "0.1@300+200,eu:0.5@900+60": every link's bandwidth x0.1 from 300 s for 200 s,
// then region eu's x0.5 from 900 s for 60 s ([region:]bandwidth_factor@at_s+for_s).
status parse_link_changes(run_config& config, const std::string& text);
// Shard restarts "0@200+30": shard 0 dies at 200 s and is back 30 s later.
status parse_shard_restarts(run_config& config, const std::string& text);
status parse_regional_restarts(run_config& config, const std::string& text);

}  // namespace diloco
