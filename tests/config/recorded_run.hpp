// A small simulated run that writes snapshots, set up as the command line records one: its
// options carry the run's identity and its configuration as text.
#pragma once

#include <string>

#include "config/identity.hpp"
#include "config/printing.hpp"
#include "config/resolve.hpp"
#include "hosts/simulation.hpp"

namespace diloco::testing {

struct recorded_run {
  run_config config;
  sim_options options;
};

// The built-in cluster on a small model, 64,000 tokens, a snapshot under `snapshot_dir` every
// 20 simulated seconds. The snapshot settings do not enter the identity: a caller may change
// them afterwards.
inline recorded_run snapshotting_run(const std::string& snapshot_dir) {
  recorded_run r;
  run_config& c = r.config;
  c = builtin_run_config();
  c.model.hidden = 32;
  c.model.embed_dim = 8;
  c.token_budget = 64000;
  derive_dependent(c);
  c.snapshot.dir = snapshot_dir;
  c.snapshot.every_s = 20;
  r.options.run_id = run_identity(c);
  r.options.config_text = config_as_yaml(c);
  return r;
}

}  // namespace diloco::testing
