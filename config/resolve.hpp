// A run's configuration from where it comes from: the built-in cluster (or a recorded run's
// configuration), a YAML cluster file, then `key=value` settings in their order; and a recorded
// configuration (a snapshot's manifest, a tape's header) reopened and checked against the run
// identity stored beside it. Values that follow from others are set in one place
// (derive_dependent), whatever the source.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/config.hpp"

namespace diloco {

// Values derived from others: the inner lr schedule spans the steps each learner takes.
void derive_dependent(run_config& config);

// The base, then the file (if any), then the settings; derived values set, validated. Every
// mistake of the file and the settings together, one per line, the file's with their line.
// Without a base, the built-in cluster; with one (a recorded run's), the settings apply on top
// of it unless a file is given.
result<run_config> resolve_config(const std::string& cluster_file,
                                  const std::vector<std::pair<std::string, std::string>>& sets,
                                  const run_config* base = nullptr);

// A recorded configuration (`text`, from `where`: a snapshot's MANIFEST or a tape) loaded on
// the built-in cluster, derived values set and validated; with a nonzero `run_id`, it must
// have that run identity, or it is refused as not the run it claims to be.
result<run_config> reopen_recorded(const std::string& text, const std::string& where,
                                   uint64_t run_id);

}  // namespace diloco
