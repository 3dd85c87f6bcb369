// The data-parallel learner role (the baseline): every step it sends its gradient, fragment by
// fragment, to the shards, waits for the mean of all learners' gradients, and applies AdamW to
// it. All replicas stay identical; every learner waits for the slowest each step.
#pragma once

#include <memory>
#include <vector>

#include "actors/learner.hpp"
#include "protocol/interfaces.hpp"
#include "runtime/env.hpp"
#include "runtime/transport.hpp"
#include "tensor/compute.hpp"
#include "tensor/rng.hpp"

namespace diloco {

struct dp_learner_state : learner_slot_state {
  // The process.
  bool alive = false;
  std::unique_ptr<learner_compute> trainer;
  bool waiting = false;
  bool stopped = false;
  uint64_t step = 0;     // the step whose gradient is in flight or computed
  uint32_t reduced = 0;  // fragments of the mean gradient received for `step`
  double step_loss = 0.0;
  int64_t step_ns = 0;  // modelled duration of the computed step
  int64_t wait_since_ns = 0;
  int64_t idle_ns = 0;
  double last_loss = 0.0;
  float_buffer local;
  float_buffer decoded;
  std::vector<uint8_t> blob;

  static inline const char* name = "dp_learner";
};

// What a snapshot keeps of this state (actors/state_io.cpp saves and loads it with
// protocol/persist.hpp): every field the actor computes with, beside the struct so that a
// field added above is added here too. Not kept: the wiring (env, dir), the snapshot agent,
// and scratch that every use overwrites.
// Loading: sizes the scratch buffers again (actors/state_io.cpp).
void after_load(dp_learner_state& x);
template <class F>
void persist_fields(F& f, dp_learner_state& x) {
  f(x.incarnation, x.tick_seq, x.out, x.alive);
  optional_trainer(f, x.trainer, *x.env, x.id, x.incarnation);
  f(x.waiting, x.stopped, x.step, x.reduced, x.step_loss, x.step_ns, x.wait_since_ns, x.speed_rng,
    x.busy_ns, x.idle_ns, x.rejected, x.last_loss, x.meter);
  if constexpr (F::loading) after_load(x);
}

learner_actor::behavior_type dp_learner(learner_actor::stateful_pointer<dp_learner_state> self,
                                        std::shared_ptr<const actor_env> env, uint32_t id,
                                        directory_ptr dir);

// The learner's parameters, fragment by fragment, as fp32 blobs (for the harness).
global_snapshot snapshot_params(const actor_env& env, const float_buffer& params);

}  // namespace diloco
