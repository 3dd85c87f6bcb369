// The fragment scheduler role: owns P, H, tau and the offsets, and tells every learner that
// joins when each fragment is due. Learners apply the schedule they are given; nothing about
// it is hard-coded in the learner.
#pragma once

#include <memory>
#include <vector>

#include "protocol/interfaces.hpp"
#include "runtime/directory.hpp"
#include "runtime/env.hpp"
#include "runtime/transport.hpp"

namespace diloco {

// Offsets in [0, H): strided spreads them evenly (p * H / P); sequential puts fragment p at
// step p of the period.
std::vector<uint32_t> fragment_offsets(schedule_pattern pattern, uint32_t fragments,
                                       uint32_t period);

// The largest number of fragments due at the same step, over one period.
uint32_t max_in_flight(const std::vector<uint32_t>& offsets, uint32_t period);

struct scheduler_state {
  std::shared_ptr<const actor_env> env;
  directory_ptr dir;
  std::vector<uint32_t> offsets;
  int64_t epoch_ns = 0;  // global step 0: when the scheduler started
  outbox out;
  uint64_t rejected = 0;

  static inline const char* name = "fragment_scheduler";
};

// What a snapshot keeps of this state (actors/state_io.cpp saves and loads it with
// protocol/persist.hpp): every field the actor computes with, beside the struct so that a
// field added above is added here too. Not kept: the wiring (env, dir), the snapshot agent,
// and scratch that every use overwrites.
template <class F>
void persist_fields(F& f, scheduler_state& x) {
  f(x.offsets, x.epoch_ns, x.out, x.rejected);
}

scheduler_actor::behavior_type fragment_scheduler(
    scheduler_actor::stateful_pointer<scheduler_state> self, std::shared_ptr<const actor_env> env,
    directory_ptr dir);

}  // namespace diloco
