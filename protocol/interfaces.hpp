// The typed interface of each actor role: what it accepts and what it answers.
// Actor code and the harness include this; nothing else needs CAF's typed_actor machinery.
#pragma once

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "protocol/messages.hpp"

namespace diloco {

// Everything the harness gets back at the end of a run from the metrics actor.
struct run_report {
  uint64_t tokens = 0;
  uint64_t steps = 0;
  int64_t end_time_ns = 0;   // clock time when the last shard flushed
  int64_t stop_time_ns = 0;  // clock time when the budget was spent
  double chip_s = 0.0;       // chip-seconds of computing over all learners
  uint64_t trace = 0;
  uint64_t learner_bytes = 0;  // sent and received by learners, every incarnation
  uint32_t shards_flushed = 0;
  bool stopped = false;
  std::vector<diverged_msg> diverged;  // learners whose numerics went non-finite, in order
  // Per learner slot, over every incarnation: what its progress reports carried (the figures
  // metrics.jsonl and /metrics show, summing to tokens and steps above).
  std::vector<uint64_t> learner_tokens, learner_steps;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_report& x) {
  return f(caf::meta::type_name("run_report"), x.tokens, x.steps, x.end_time_ns, x.stop_time_ns,
           x.chip_s, x.trace, x.learner_bytes, x.shards_flushed, x.stopped, x.diverged,
           x.learner_tokens, x.learner_steps);
}

using learner_actor = caf::typed_actor<                     //
    caf::reacts_to<start_msg>, caf::reacts_to<rewire_msg>,  //
    caf::reacts_to<marker_msg>,                             //
    caf::reacts_to<schedule_msg>,                           //
    caf::reacts_to<fragment_update_msg>,                    //
    caf::reacts_to<reduced_gradient_msg>,                   //
    caf::reacts_to<step_tick>,                              //
    caf::reacts_to<stop_msg>,                               //
    caf::reacts_to<capacity_msg>,                           //
    caf::reacts_to<leave_msg>,                              //
    caf::reacts_to<peer_msg>,                               //
    caf::reacts_to<copy_request>,                           //
    caf::reacts_to<kill_msg>,                               //
    caf::reacts_to<restart_msg>,                            //
    caf::reacts_to<closed_msg>,                             //
    caf::replies_to<report_request>::with<learner_report>,  //
    caf::replies_to<global_request>::with<global_snapshot>>;

using shard_actor = caf::typed_actor<                       //
    caf::reacts_to<start_msg>, caf::reacts_to<rewire_msg>,  //
    caf::reacts_to<marker_msg>,                             //
    caf::reacts_to<join_msg>,                               //
    caf::reacts_to<outer_gradient_msg>,                     //
    caf::reacts_to<pull_msg>,                               //
    caf::reacts_to<gradient_msg>,                           //
    caf::reacts_to<grace_tick>, caf::reacts_to<copy_msg>,
    caf::reacts_to<recovery_tick>,  //
    caf::reacts_to<service_tick>,   //
    caf::reacts_to<kill_msg>,       //
    caf::reacts_to<restart_msg>,    //
    caf::reacts_to<closed_msg>,     //
    // A regional syncer is one of these too: what a shard answers a learner, it takes.
    caf::reacts_to<fragment_update_msg>,                  //
    caf::reacts_to<copy_request>,                         //
    caf::reacts_to<peer_msg>,                             //
    caf::reacts_to<schedule_msg>,                         //
    caf::replies_to<report_request>::with<shard_report>,  //
    caf::replies_to<global_request>::with<global_snapshot>>;

using scheduler_actor = caf::typed_actor<                   //
    caf::reacts_to<start_msg>, caf::reacts_to<rewire_msg>,  //
    caf::reacts_to<marker_msg>,                             //
    caf::reacts_to<join_msg>,                               //
    caf::reacts_to<pace_msg>>;

using metrics_actor = caf::typed_actor<                     //
    caf::reacts_to<start_msg>, caf::reacts_to<rewire_msg>,  //
    caf::reacts_to<marker_msg>,                             //
    caf::reacts_to<join_msg>,                               //
    caf::reacts_to<progress_msg>,                           //
    caf::reacts_to<flushed_msg>,                            //
    caf::reacts_to<merge_msg>,                              //
    caf::reacts_to<diverged_msg>,                           //
    caf::reacts_to<deadline_tick>,                          //
    caf::replies_to<report_request>::with<run_report>>;

// What the supervisor reports: the learners it runs now and the failures it injected.
struct supervisor_report {
  std::vector<learner_actor> learners;
  uint32_t kills = 0;
  uint32_t restarts = 0;
  uint64_t interruptions = 0;       // random failures injected
  uint64_t rescales = 0;            // elastic shrink and grow pauses
  double uptime_s = 0.0;            // time in which at least one learner was computing
  double observed_s = 0.0;          // time the supervisor watched (from its start to the report)
  double computing_chip_s = 0.0;    // chips x working share x time, over learners up and not paused
  double provisioned_chip_s = 0.0;  // chips x time over the learners that were members
  std::vector<shard_actor> shards;
  uint32_t shard_restarts = 0;
  uint64_t trace = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, supervisor_report& x) {
  return f(caf::meta::type_name("supervisor_report"), x.learners, x.kills, x.restarts,
           x.interruptions, x.rescales, x.uptime_s, x.observed_s, x.computing_chip_s,
           x.provisioned_chip_s, x.shards, x.shard_restarts, x.trace);
}

// Spawns the learners, injects the configured failures, restarts the failed learners.
using supervisor_actor = caf::typed_actor<                  //
    caf::reacts_to<start_msg>, caf::reacts_to<rewire_msg>,  //
    caf::reacts_to<marker_msg>,                             //
    caf::reacts_to<fault_tick>,                             //
    caf::reacts_to<chaos_tick>, caf::reacts_to<membership_tick>,
    caf::reacts_to<shard_tick>,  //
    caf::reacts_to<stop_msg>,    //
    caf::replies_to<report_request>::with<supervisor_report>>;

// What the snapshot coordinator reports.
struct coordinator_report {
  uint64_t snapshots = 0;  // committed (manifest written)
  uint64_t skipped = 0;    // due while one was still in progress
  uint64_t failed = 0;     // could not be written (disk errors; the run goes on)
  uint64_t bytes_written = 0;
  double write_wall_s = 0.0;  // wall time spent encoding and writing files
  uint64_t trace = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, coordinator_report& x) {
  return f(caf::meta::type_name("coordinator_report"), x.snapshots, x.skipped, x.failed,
           x.bytes_written, x.write_wall_s, x.trace);
}

// Starts Chandy-Lamport snapshots (periodic, at scripted times, every N steps, on demand),
// collects every actor's part and writes the snapshot directory (actors/coordinator.hpp).
using coordinator_actor = caf::typed_actor<                 //
    caf::reacts_to<start_msg>, caf::reacts_to<rewire_msg>,  //
    caf::reacts_to<marker_msg>,                             //
    caf::reacts_to<snapshot_part>,                          //
    caf::reacts_to<snapshot_request>,                       //
    caf::reacts_to<snapshot_tick>,                          //
    caf::reacts_to<stop_msg>,                               //
    caf::replies_to<report_request>::with<coordinator_report>>;

}  // namespace diloco
