// Internals shared by the runtimes of hosts/simulation.cpp and hosts/deploy.cpp: spawning
// and wiring actor slots, starting and stopping them, and assembling the run's report.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <memory>
#include <vector>

#include "actors/coordinator.hpp"
#include "runtime/directory.hpp"
#include "runtime/env.hpp"
#include "hosts/simulation.hpp"

namespace diloco::harness {

// The actor of slot `index`, spawned (not started); `dir` is the directory it will use.
caf::actor spawn_actor(caf::actor_system& sys, const std::shared_ptr<const actor_env>& env,
                       const directory_ptr& dir, uint32_t index,
                       std::shared_ptr<const snapshot_context> ctx);
// Puts a handle (local, or a remote proxy) into its slot of the directory.
void place(cluster_directory& dir, const actor_indices& ids, uint32_t index, const caf::actor& a);
void stop_cluster(const cluster_directory& dir);
int64_t clock_ticks_now(caf::actor_system& sys);
// Logging off and the protocol's types registered. In place: CAF 0.17 binds its options to the
// config's members, so a copied or moved config writes options into the old object.
void make_quiet(caf::actor_system_config& cfg);

struct collected {
  run_report run;
  coordinator_report snapshots;
  supervisor_report supervisor;
  std::vector<learner_report> learners;
  std::vector<shard_report> shards;
  std::vector<global_snapshot> globals;
};
result<sim_result> assemble(const run_config& config, const actor_env& env, collected col);

}  // namespace diloco::harness
