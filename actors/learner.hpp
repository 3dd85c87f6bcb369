// The learner role (Decoupled and synchronous DiLoCo): one model replica training with its own
// inner optimizer on its own data shard, sending each fragment's outer gradient when the
// fragment scheduler's schedule says it is due, and mixing the returned global fragment in
// `overlap_steps` later. It never waits for anyone, except in synchronous DiLoCo, where waiting
// for the merge is the algorithm.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "actors/fragment_schedule.hpp"
#include "actors/pace.hpp"
#include "actors/progress_meter.hpp"
#include "protocol/interfaces.hpp"
#include "runtime/directory.hpp"
#include "runtime/env.hpp"
#include "runtime/transport.hpp"
#include "tensor/compute.hpp"
#include "tensor/rng.hpp"

namespace diloco {

// Adaptive inner steps: one send of a fragment's outer gradient, as measured.
struct sent_record {
  uint64_t step = 0;   // its schedule step
  int64_t at_ns = 0;   // when it left
  uint64_t bytes = 0;  // its size on the wire
};

// Per fragment, in the fragment's local (gathered) form.
struct fragment_sync {
  float_buffer global;  // this learner's copy of the global fragment, at `version`
  uint64_t version = 0;
  float_buffer reference;  // the point the next outer gradient is measured from
  float_buffer residual;   // uplink error feedback
  uint64_t tokens = 0;     // work the next delta carries (merge_global)
  uint64_t steps = 0;
  bool awaiting = false;             // a sent delta whose reply is not merged yet
  uint64_t awaiting_since = 0;       // schedule step of the oldest unanswered send
  uint64_t sent_step = 0;            // schedule step of the most recent send
  std::vector<uint64_t> unanswered;  // schedule steps of the sends no reply has answered yet
  uint64_t pull_since = 0;  // schedule step + 1 of a resync pull not answered yet (0: none)
  bool reply_ready = false;
  uint64_t last_reply_step = 0;  // newest send a reply answered (duplicates)
  bool pulled = false;           // rejoin: the whole fragment arrived
  uint64_t merge_at_step = 0;    // merge the reply at the boundary after this step
  uint64_t version_at_loss = 0;  // `version` when its shard's process last went away
  // Adaptive inner steps: the recent sends (schedule step, when it left, its size on the
  // wire), so that a reply to any of them is a measured round, in order and a few deep.
  std::deque<sent_record> sends;
};

// What every learner kind's state holds (learner, data-parallel learner, cost learner): the
// slot, kept across processes, and the measurements every kind's process keeps.
struct learner_slot_state {
  // The slot.
  std::shared_ptr<const actor_env> env;
  uint32_t id = 0;
  uint32_t incarnation = 0;
  directory_ptr dir;
  outbox out;
  uint64_t tick_seq = 0;  // never reused, so a dead process's timers stay void

  // The process.
  rng speed_rng;          // its step-time draws
  int64_t busy_ns = 0;    // computing
  uint64_t rejected = 0;  // messages refused as malformed or out of place
  progress_meter meter;   // since the last progress report
};

struct learner_state : learner_slot_state {
  // down: the slot's process died; absent: no process (not yet a member, or it left).
  enum class phase { absent, joining, pulling, running, waiting, stopped, down };

  // The process.
  std::unique_ptr<learner_compute> trainer;  // the model replica, its optimizer and data
  std::vector<fragment_sync> frags;
  // This process adopts the global model before it trains: a restart, or a first process that
  // joins a run already under way (it would otherwise start from the initial model).
  bool pulls_global = false;
  // The schedule step of the step the computation was asked to compute ahead, -1 if none: a
  // hint for speed only, never persisted (docs/architecture.md "Parallel simulation").
  int64_t ahead_step = -1;

  fragment_schedule schedule;
  bool global_clock = true;
  int64_t epoch_ns = 0;
  int64_t step_ns = 1;
  uint64_t last_step = 0;  // schedule step at the previous boundary

  phase now = phase::absent;
  double capacity = 1.0;        // share of the learner's chips that work (elastic)
  int64_t paused_until_ns = 0;  // elastic rescale: no step starts before this
  uint32_t pulls_outstanding = 0;
  uint64_t resume_step = 0;
  int64_t wait_since_ns = 0;

  // Measurements.
  double step_time_ns_ema = 0.0;
  uint64_t late_updates = 0;
  uint64_t version_regressions = 0;
  uint64_t lost_shard_down = 0;             // unanswered deltas to a shard that died
  std::vector<bool> shard_down;             // by shard: its process ended, no successor known yet
  std::vector<uint32_t> shard_incarnation;  // by shard: the newest process heard of
  uint64_t duplicate_updates = 0;
  uint64_t resyncs = 0;
  uint64_t deltas_held = 0;  // due sends held back: max_unanswered_deltas were unanswered
  int64_t idle_ns = 0;
  double last_loss = 0.0;
  // Adaptive inner steps: the newest rounds measured (one period's worth), and when the newest
  // reply from each shard arrived.
  std::deque<link_sample> pace_samples;
  std::vector<int64_t> last_reply_ns;
  // The loss gap at merges: the step after a merge against the step before it (the global
  // fragment against the local one), relative to the loss before.
  bool measure_merge = false;
  double loss_before_merge = 0.0;

  // Scratch, sized once (the largest fragment): a decoded reply, or an outer gradient being
  // encoded (without error feedback, which accumulates it in the residual).
  float_buffer decoded;
  std::vector<uint8_t> blob;

  static inline const char* name = "learner";
};

// What a snapshot keeps of this state (actors/state_io.cpp saves and loads it with
// protocol/persist.hpp): every field the actor computes with, beside the struct so that a
// field added above is added here too. Not kept: the wiring (env, dir), the snapshot agent,
// and scratch that every use overwrites.
// Loading: sizes the scratch buffers again and checks the fragments (actors/state_io.cpp).
void after_load(learner_state& x);
template <class F>
void persist_fields(F& f, fragment_sync& x) {
  f(x.global, x.version, x.reference, x.residual, x.tokens, x.steps, x.awaiting, x.awaiting_since,
    x.sent_step, x.unanswered, x.pull_since, x.reply_ready, x.last_reply_step, x.pulled,
    x.merge_at_step, x.version_at_loss, x.sends);
}

template <class F>
void persist_fields(F& f, sent_record& x) {
  f(x.step, x.at_ns, x.bytes);
}

template <class F>
void persist_fields(F& f, learner_state& x) {
  f(x.incarnation, x.tick_seq, x.out, x.now, x.pulls_global);
  optional_trainer(f, x.trainer, *x.env, x.id, x.incarnation);
  f(x.frags, x.schedule, x.global_clock, x.epoch_ns, x.step_ns, x.last_step, x.capacity,
    x.paused_until_ns, x.pulls_outstanding, x.resume_step, x.wait_since_ns, x.speed_rng,
    x.step_time_ns_ema, x.late_updates, x.rejected, x.version_regressions, x.lost_shard_down,
    x.shard_down, x.shard_incarnation, x.duplicate_updates, x.resyncs, x.deltas_held, x.busy_ns,
    x.idle_ns, x.last_loss, x.meter, x.measure_merge, x.loss_before_merge, x.pace_samples,
    x.last_reply_ns);
  if constexpr (F::loading) after_load(x);
}

// Learner slot `id`; slots below config.learners start a process at start_msg, the others
// wait for a restart_msg (a membership join).
learner_actor::behavior_type learner(learner_actor::stateful_pointer<learner_state> self,
                                     std::shared_ptr<const actor_env> env, uint32_t id,
                                     directory_ptr dir);

}  // namespace diloco
