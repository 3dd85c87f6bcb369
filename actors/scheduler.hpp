// The fragment scheduler role: owns P, H, tau and the offsets, and tells every learner that
// joins when each fragment is due. Learners apply the schedule they are given; nothing about
// it is hard-coded in the learner.
#pragma once

#include <map>
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

// Adaptive inner steps: a learner's latest report, as the H it asks for.
struct period_need {
  double period = 0.0;  // the H and tau its links need (pace.hpp, needed)
  double overlap = 0.0;
  uint32_t change = 0;  // the schedule it measured under
  int64_t at_ns = 0;    // when it came
};

struct scheduler_state {
  std::shared_ptr<const actor_env> env;
  directory_ptr dir;
  std::vector<uint32_t> offsets;
  int64_t epoch_ns = 0;  // global step 0: when the scheduler started
  outbox out;
  uint64_t rejected = 0;
  // Adaptive inner steps: H and tau now, the change that set them and the step they hold from,
  // and what each learner asks for.
  uint32_t period = 0;
  uint32_t overlap = 0;
  uint32_t change = 0;
  uint64_t from_step = 0;
  std::map<uint32_t, period_need> needs;

  static inline const char* name = "fragment_scheduler";
};

// What a snapshot keeps of this state (actors/state_io.cpp saves and loads it with
// protocol/persist.hpp): every field the actor computes with, beside the struct so that a
// field added above is added here too. Not kept: the wiring (env, dir), the snapshot agent,
// and scratch that every use overwrites.
template <class F>
void persist_fields(F& f, period_need& x) {
  f(x.period, x.overlap, x.change, x.at_ns);
}

template <class F>
void persist_fields(F& f, scheduler_state& x) {
  f(x.offsets, x.epoch_ns, x.out, x.rejected, x.period, x.overlap, x.change, x.from_step, x.needs);
}

scheduler_actor::behavior_type fragment_scheduler(
    scheduler_actor::stateful_pointer<scheduler_state> self, std::shared_ptr<const actor_env> env,
    directory_ptr dir);

}  // namespace diloco
