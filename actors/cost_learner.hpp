// The cost-model learner: the learner role without the math. Its steps are durations from
// its speed model (scaled by its working share of chips when elastic); it keeps the real
// protocol with the fragment scheduler and the shards (outer gradients and updates carry no
// values, their modelled sizes set the link delays), so studies at a scale no machine could
// train exercise the same runtime. It wakes only when a fragment falls due, not every step.
#pragma once

#include <memory>
#include <vector>

#include "actors/learner.hpp"
#include "protocol/interfaces.hpp"
#include "runtime/env.hpp"
#include "runtime/transport.hpp"
#include "tensor/rng.hpp"

namespace diloco {

struct cost_fragment {
  uint64_t version = 0;
  double steps = 0.0;  // work since the last send
  bool awaiting = false;
  uint64_t sent_step = 0;
};

struct cost_learner_state : learner_slot_state {
  enum class phase { absent, joining, pulling, running, stopped, down };

  // The process.
  phase now = phase::absent;
  uint32_t pulls_outstanding = 0;

  fragment_schedule schedule = [] {
    fragment_schedule s;
    s.period_steps = 1;
    return s;
  }();
  int64_t epoch_ns = 0;
  int64_t step_ns = 1;
  uint64_t last_step = 0;  // schedule step of the previous wake-up

  std::vector<cost_fragment> frags;
  std::vector<bool> shard_down;
  std::vector<uint32_t> shard_incarnation;
  double capacity = 1.0;
  int64_t paused_until_ns = 0;
  int64_t accounted_ns = 0;  // work is accounted up to here
  double factor = 1.0;       // this interval's step-time factor (slowdown x jitter)

  double steps_done = 0.0;
  double chip_s = 0.0;

  static inline const char* name = "cost_learner";
};

// What a snapshot keeps of this state (actors/state_io.cpp saves and loads it with
// protocol/persist.hpp): every field the actor computes with, beside the struct so that a
// field added above is added here too. Not kept: the wiring (env, dir), the snapshot agent,
// and scratch that every use overwrites.
template <class F>
void persist_fields(F& f, cost_fragment& x) {
  f(x.version, x.steps, x.awaiting, x.sent_step);
}

template <class F>
void persist_fields(F& f, cost_learner_state& x) {
  f(x.incarnation, x.tick_seq, x.out, x.now, x.pulls_outstanding, x.schedule, x.epoch_ns, x.step_ns,
    x.last_step, x.frags, x.shard_down, x.shard_incarnation, x.capacity, x.paused_until_ns,
    x.accounted_ns, x.factor, x.speed_rng, x.steps_done, x.chip_s, x.busy_ns, x.rejected, x.meter);
}

// A cost run's fragment updates carry no values (their modelled size delays them on the
// link): on arrival they count the per-message overhead only.
inline uint64_t received_bytes(const cost_learner_state&, const fragment_update_msg&) {
  return message_overhead_bytes;
}

learner_actor::behavior_type cost_learner(learner_actor::stateful_pointer<cost_learner_state> self,
                                          std::shared_ptr<const actor_env> env, uint32_t id,
                                          directory_ptr dir);

}  // namespace diloco
