// The learner role (Decoupled and synchronous DiLoCo): one model replica training with its own
// inner optimizer on its own data shard, sending each fragment's outer gradient when the
// fragment scheduler's schedule says it is due, and mixing the returned global fragment in
// `overlap_steps` later. It never waits for anyone, except in synchronous DiLoCo, where waiting
// for the merge is the algorithm.
#pragma once

#include <memory>
#include <vector>

#include "actors/env.hpp"
#include "actors/transport.hpp"
#include "protocol/interfaces.hpp"
#include "tensor/rng.hpp"
#include "tensor/trainer.hpp"

namespace diloco {

struct learner_peers {
  scheduler_actor scheduler;
  std::vector<shard_actor> shards;  // by shard index
  metrics_actor metrics;
};

// Per fragment, in the fragment's local (gathered) form.
struct fragment_sync {
  float_buffer global;  // this learner's copy of the global fragment, at `version`
  uint64_t version = 0;
  float_buffer reference;  // the point the next outer gradient is measured from
  float_buffer residual;   // uplink error feedback
  uint64_t tokens = 0;     // work since `reference` was set
  uint64_t steps = 0;
  bool awaiting = false;        // a sent delta whose reply is not merged yet
  uint64_t awaiting_since = 0;  // schedule step of the oldest unanswered send
  uint64_t sent_step = 0;       // schedule step of the most recent send
  bool reply_ready = false;
  uint64_t last_reply_step = 0;  // newest send a reply answered (duplicates)
  bool pulled = false;           // rejoin: the whole fragment arrived
  uint64_t merge_at_step = 0;    // merge the reply at the boundary after this step
};

struct learner_state {
  enum class phase { joining, pulling, running, waiting, stopped };

  std::shared_ptr<const actor_env> env;
  uint32_t id = 0;
  uint32_t incarnation = 0;
  learner_peers peers;
  std::unique_ptr<inner_trainer> trainer;
  std::vector<fragment_sync> frags;

  uint32_t period_steps = 0;
  uint32_t overlap_steps = 0;
  std::vector<uint32_t> offsets;
  bool global_clock = true;
  int64_t epoch_ns = 0;
  int64_t step_ns = 1;
  uint64_t last_step = 0;  // schedule step at the previous boundary

  phase now = phase::joining;
  double capacity = 1.0;        // share of the learner's chips that work (elastic)
  int64_t paused_until_ns = 0;  // elastic rescale: no step starts before this
  uint32_t pulls_outstanding = 0;
  uint64_t resume_step = 0;
  uint64_t tick_seq = 0;
  int64_t wait_since_ns = 0;
  rng speed_rng;
  outbox out;

  // Measurements.
  double step_time_ns_ema = 0.0;
  uint64_t late_updates = 0;
  uint64_t rejected = 0;
  uint64_t version_regressions = 0;
  uint64_t lost_shard_down = 0;  // unanswered deltas to a shard that died
  std::vector<bool> shard_down;  // by shard: dead, its new address not known yet
  uint64_t duplicate_updates = 0;
  uint64_t resyncs = 0;
  int64_t busy_ns = 0;
  int64_t idle_ns = 0;
  double last_loss = 0.0;
  // Since the last progress report.
  uint64_t report_steps = 0;
  double report_loss_sum = 0.0;
  int64_t report_busy_ns = 0;
  int64_t report_idle_ns = 0;
  double report_chip_s = 0.0;

  // Scratch, sized once.
  float_buffer local;
  float_buffer delta;
  float_buffer decoded;
  std::vector<uint8_t> blob;

  static inline const char* name = "learner";
};

learner_actor::behavior_type learner(learner_actor::stateful_pointer<learner_state> self,
                                     std::shared_ptr<const actor_env> env, uint32_t id,
                                     uint32_t incarnation, learner_peers peers);

}  // namespace diloco
