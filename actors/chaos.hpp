// The chaos role, which also supervises the learners: it starts and stops the processes on
// the learner and shard slots (runtime/directory.hpp), injects failures, and restarts or
// rescales the failed ones. Two sources of failure:
//   - scripted events (config `failures`): a learner dies at a time and restarts later;
//   - random interruptions (config `interruptions`): each learner fails as a Poisson process
//     of rate chips / MTBI; a non-elastic learner is killed and restarted after the recovery
//     time (it pulls the global model and rejoins), an elastic one pauses for the rescale
//     time and continues without the failed unit until it is repaired.
// It also keeps the uptime: the time in which at least one learner was computing.
#pragma once

#include <memory>
#include <vector>

#include "actors/learner.hpp"
#include "protocol/interfaces.hpp"
#include "runtime/directory.hpp"
#include "runtime/env.hpp"
#include "runtime/transport.hpp"
#include "tensor/rng.hpp"

namespace diloco {

struct chaos_learner {
  bool member = false;  // joined and not left (its chips are provisioned)
  bool ran = false;     // a process has run on the slot before
  uint32_t incarnation = 0;
  bool down = false;            // killed, waiting for its restart
  int64_t paused_until_ns = 0;  // elastic rescale in progress until then
  uint32_t failed_units = 0;    // elastic: units out for repair
  double capacity = 1.0;        // elastic: working share of the chips
  rng failures;                 // this learner's interruption process
};

struct chaos_state {
  std::shared_ptr<const actor_env> env;
  directory_ptr dir;
  std::vector<chaos_learner> learners;
  std::vector<uint32_t> shard_incarnation;
  bool stopped = false;
  supervisor_report report;
  int64_t start_ns = 0;
  int64_t accounted_ns = 0;  // uptime is integrated up to here
  outbox out;
  std::vector<double> chips;  // not state: each learner slot's chips, from the config

  static inline const char* name = "chaos";
};

// What a snapshot keeps of this state (actors/state_io.cpp saves and loads it with
// protocol/persist.hpp): every field the actor computes with, beside the struct so that a
// field added above is added here too. Not kept: the wiring (env, dir), the snapshot agent,
// and scratch that every use overwrites.
template <class F>
void persist_fields(F& f, chaos_learner& x) {
  f(x.member, x.ran, x.incarnation, x.down, x.paused_until_ns, x.failed_units, x.capacity,
    x.failures);
}

template <class F>
void persist_fields(F& f, chaos_state& x) {
  auto& r = x.report;
  f(x.learners, x.shard_incarnation, x.stopped, r.kills, r.restarts, r.interruptions, r.rescales,
    r.uptime_s, r.observed_s, r.computing_chip_s, r.provisioned_chip_s, r.shard_restarts, r.trace,
    x.start_ns, x.accounted_ns, x.out);
}

supervisor_actor::behavior_type chaos(supervisor_actor::stateful_pointer<chaos_state> self,
                                      std::shared_ptr<const actor_env> env, directory_ptr dir);

}  // namespace diloco
