// What every host of a run shares (simulation, real time, replay, deployment): spawning and
// wiring actor slots, starting and stopping them, watching a real-time run until it is done,
// collecting every actor's report, and assembling the run's result. Written once here.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "actors/coordinator.hpp"
#include "hosts/simulation.hpp"
#include "runtime/directory.hpp"
#include "runtime/env.hpp"

namespace caf {
class scoped_actor;
}

namespace diloco::harness {

// The actor of slot `index`, spawned (not started); `dir` is the directory it will use.
caf::actor spawn_actor(caf::actor_system& sys, const std::shared_ptr<const actor_env>& env,
                       const directory_ptr& dir, uint32_t index,
                       std::shared_ptr<const snapshot_context> ctx);
// Puts a handle (local, or a remote proxy) into its slot of the directory.
void place(cluster_directory& dir, const actor_indices& ids, uint32_t index, const caf::actor& a);
// Every actor slot of the cluster, spawned and wired (runtime/directory.hpp), not yet started.
std::shared_ptr<cluster_directory> spawn_cluster(caf::actor_system& sys,
                                                 const std::shared_ptr<const actor_env>& env,
                                                 std::shared_ptr<const snapshot_context> ctx);
// Every actor begins, once all of them are wired: fresh, or from its part of a snapshot.
void start_cluster(const cluster_directory& dir, const loaded_snapshot* from);
void stop_cluster(const cluster_directory& dir);
int64_t clock_ticks_now(caf::actor_system& sys);
// The environment of a run whose learners all compute in this process (simulation, real time):
// made from the config with its hooks, and refused when the model cannot run here.
result<std::shared_ptr<const actor_env>> local_run_env(const run_config& config, bool virtual_time,
                                                       actor_env::hooks with);
// Logging off and the protocol's types registered. In place: CAF 0.17 binds its options to the
// config's members, so a copied or moved config writes options into the old object.
void make_quiet(caf::actor_system_config& cfg);

struct collected {
  run_report run;
  coordinator_report snapshots;
  supervisor_report supervisor;
  std::vector<learner_report> learners;
  std::vector<shard_report> shards;
  std::vector<shard_report> regionals;  // the regional syncers', by number
  std::vector<global_snapshot> globals;
  // The model cannot be evaluated here (a PyTorch model at a leader without PyTorch): a
  // learner evaluated its copy of the final global model.
  std::optional<global_snapshot> learner_eval;
  uint32_t evaluated_by = 0;
};
result<sim_result> assemble(const run_config& config, const actor_env& env, collected col);

// A real-time run is done when the budget is spent and every shard had its final merge (data
// parallel has no final merge: done when stopped).
bool run_done(const run_report& r, const run_config& config, const actor_indices& ids);

// Asks the metrics actor for its report every `interval_s` until the run is done; `each` sees
// every report and ends the wait early with its error. `last` holds the last report.
status poll_until_done(caf::scoped_actor& self, caf::actor_system& sys,
                       const metrics_actor& metrics, const run_config& config,
                       const actor_indices& ids, double interval_s, run_report& last,
                       const std::function<status(const run_report&)>& each);

// Asks every actor of `now` for its report, in real time: the supervisor (its counters), the
// shards (and their global values), the learners, and for data parallel learner 0's model.
// Which learners: with `down` (a deployment, where the supervisor's handles are only for its
// own process), every slot, those marked down reporting only their slot; without it (one
// process), the learners the supervisor keeps up. A learner that does not answer is warned
// about and reports only its slot. An error when a shard or a model does not answer. When the
// model cannot be evaluated in this process (env.model->runnable() fails), the first learner
// that reported evaluates its copy of the final global model (col.learner_eval).
status collect_reports(caf::scoped_actor& self, caf::actor_system& sys,
                       const cluster_directory& now, const actor_env& env,
                       const std::vector<bool>* down, collected& col);

}  // namespace diloco::harness
