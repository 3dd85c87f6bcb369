// The syncer shard role: owner of the global value of some fragments. It validates the outer
// gradients learners send, keeps them pending until a quorum of K learners has arrived and an
// adaptive grace window has passed, merges them with token weights (RDA, the embedding spans
// averaged), applies the outer Nesterov step and answers each contributor with the encoded
// updates that take its copy to the new version. (In the data-parallel baseline the shard slots
// run actors/reducer.hpp instead.)
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "actors/pace.hpp"
#include "base/slot_map.hpp"
#include "protocol/interfaces.hpp"
#include "runtime/directory.hpp"
#include "runtime/env.hpp"
#include "runtime/transport.hpp"

namespace diloco {

struct pending_delta {
  // The learner's outer gradients as they arrived, encoded (checked on arrival), decoded and
  // summed in this order only when they are merged: a shard holds a pending delta at its
  // encoded size, not as floats (int4: 1/8 of them).
  std::vector<tensor_blob> blobs;
  uint64_t tokens = 0;
  uint64_t steps = 0;
  uint64_t base_version = 0;         // oldest base among the combined deltas
  uint64_t send_step = 0;            // newest send among them
  std::vector<uint64_t> send_steps;  // every send combined into this delta
  int64_t deadline_ns = 0;           // earliest mixing deadline among them
  int64_t arrived_ns = 0;            // when the first of them arrived
  uint64_t bytes = 0;                // their encoded size
  int64_t uplink_ns = 0;             // the newest one's time on the wire (adaptive H)
  uint32_t overlap_steps = 0;        // the largest tau among them (adaptive H; 0 otherwise)
};

// A regional syncer's merged send of a fragment to its shard, awaiting the answer: the sends of
// its learners it merged, each answered once the shard's reply is here.
struct upstream_send {
  uint64_t send_step = 0;  // the regional syncer's own send step
  int64_t sent_ns = 0;
  std::vector<uint32_t> learners;
  std::vector<uint64_t> bases, steps;  // each learner's base version and its newest send
  uint64_t bytes = 0;                  // the merged delta's message (adaptive H's rounds)
  bool held = false;                   // its deltas waited for the answer to the send before
};

// Sends of a learner remembered by the double-merge check (far more than can be pending).
constexpr size_t merge_log_depth = 256;

struct owned_fragment {
  uint32_t id = 0;
  float_buffer global;
  float_buffer momentum;
  // The outer round in progress (docs/architecture.md, "Partial merges"): the share of its
  // expected weight merged so far, and the share-weighted merged deltas that advance the
  // momentum once the round is over.
  double round_share = 0.0;
  float_buffer round_delta;
  slot_map<double> expected_weight;  // by learner: its weight in its latest merge here
  // Rounds the global has moved: the shares merged so far (since the start or a recovery), and
  // what that sum was while each of the versions [version - size, version) was the newest, so
  // that a late delta's lateness is counted in rounds, not in merges.
  double shares_merged = 0.0;
  std::deque<double> share_marks;
  float_buffer down_residual;  // error feedback of the downlink codec
  uint64_t version = 0;
  std::deque<tensor_blob>
      history;  // encoded updates that produced versions (version - size, version]
  slot_map<pending_delta> pending;  // by learner: merged in learner order
  slot_map<uint64_t> last_send;     // by learner: newest non-final send seen (duplicates)
  std::map<uint32_t, std::deque<uint64_t>>
      merge_log;  // by learner: recent merged sends (invariant)
  // Not state (derived, rebuilt when missing): by learner, a bound on every step in merge_log,
  // so that a send newer than all of them skips the search.
  slot_map<uint64_t> merge_log_max;
  slot_map<uint64_t> learner_version;  // by learner: the version its copy has, as far as known
  std::set<uint32_t> finals;           // learners that sent their last delta
  uint64_t round = 0;                  // merges so far; identifies the armed grace timer
  bool armed = false;
  int64_t armed_until_ns = 0;  // when the armed grace window ends (it only ever moves earlier)
  bool flushed = false;
  // Recovery after a restart: the newest copy a learner offered.
  bool has_copy = false;
  uint64_t copy_version = 0;
  tensor_blob copy;
  uint64_t merges_since_recovery = 0;
  bool recovered = false;          // this process recovered the fragment from copies
  uint64_t recovered_version = 0;  // at the end of that recovery
  bool momentum_restored = false;  // recovering: the outer momentum came from a snapshot
  // A regional syncer's fragment: `global`, `version` and `history` mirror its shard's, as the
  // shard's replies bring them. Its merged sends awaiting the answer (oldest first), the error
  // feedback of its uplink codec, and (recovering) whether the shard's whole fragment came.
  std::deque<upstream_send> in_flight;
  float_buffer up_residual;
  bool mirrored = false;
  bool held = false;  // a merge waited for the answer to the newest send (since that send)
  // Not state (derived; built again after a load, emptied with `pending`): what the grace
  // window reads of the pending deltas at each arrival, kept as they come, so that a round with
  // M learners costs O(M) and not O(M^2) (pending_view in actors/syncer.cpp).
  struct pending_summary {
    bool valid = false;
    size_t contributors = 0;  // pending deltas with steps in them
    int64_t min_deadline_ns = INT64_MAX, min_arrived_ns = INT64_MAX;
    uint32_t max_overlap = 0;
  };
  pending_summary pending_sum;
};

// Messages a recovering shard holds until it serves again (bounded; beyond, dropped and
// counted: the learners re-send or re-sync).
constexpr size_t recovery_buffer_max = 4096;

// A shard slot's process: none (down: not started yet, or its host failed), restarted and
// collecting the learners' copies of its fragments (recovering: outer gradients and pulls are
// held), or merging and answering (serving).
enum class shard_phase : uint8_t { down, recovering, serving };

struct shard_state {
  // The slot: kept across processes.
  std::shared_ptr<const actor_env> env;
  uint32_t index = 0;
  uint32_t incarnation = 0;
  directory_ptr dir;
  outbox out;

  // The process: where it stands.
  shard_phase phase = shard_phase::down;
  bool alive() const { return phase != shard_phase::down; }
  bool recovering() const { return phase == shard_phase::recovering; }
  std::vector<owned_fragment> owned;
  std::vector<int> slot_of;           // fragment id -> index in owned, or -1
  slot_map<learner_actor> live;       // joined and not down
  slot_map<uint64_t> last_send_step;  // learner -> newest send seen (rejoin resume)
  shard_report counters;
  double latency_ns_ema = 0.0;     // one-way learner -> shard, measured on arrivals
  slot_map<int64_t> step_time_ns;  // by learner: its step time, as it last reported
  // Not state (derived; dropped wherever `live` or a live learner's step time changes): the
  // live learners' slowest step time, which the grace window reads at each arrival.
  int64_t slowest_live_step_ns = 0;
  bool slowest_valid = false;
  slot_map<int64_t> join_delay_ns;    // by learner: its latest join's one-way time
  slot_map<int64_t> last_arrival_ns;  // by learner: its newest delta (adaptive H)
  bool flushed_reported = false;
  std::vector<outer_gradient_msg> held_deltas;
  // Simulated merge cost (debug.slow_shard_s): outer gradients wait here, the head in service.
  std::deque<outer_gradient_msg> in_service;
  std::vector<pull_msg> held_pulls;
  uint64_t held_dropped = 0;
  float_buffer decoded, merged;  // scratch, the largest fragment each (merged: also the update)
  std::vector<float_buffer>
      spare;  // a merge's decoded deltas (one fragment each), reused: no allocation per merge
  std::vector<uint8_t> blob;
  // A regional syncer (index >= the run's shards; actors/regional.cpp): its view of each
  // shard's process, its own send steps (rising over its processes: a restart resumes past the
  // newest the shards saw), the measured time from a merged send to its answer, and whether it
  // is a member at the shards (it leaves while none of its learners is live).
  std::vector<bool> upstream_down;
  std::vector<uint32_t> upstream_incarnation;
  uint64_t up_send_step = 0;
  double up_round_ns_ema = 0.0;
  bool upstream_joined = false;
  // Learners whose process ended (their closed arrived), until they join again: an outer
  // gradient of theirs still in flight does not make them live again.
  std::set<uint32_t> departed;
  // A regional syncer under adaptive inner steps (period_steps: auto) measures its wide-area
  // link as a learner measures its own: the schedule change in force (the scheduler tells it),
  // its newest rounds, and when each shard's latest answer arrived.
  uint32_t schedule_change = 0;
  std::deque<link_sample> pace_samples;
  std::vector<int64_t> up_last_reply_ns;

  static inline const char* name = "syncer";
};

// What a snapshot keeps of this state (actors/state_io.cpp saves and loads it with
// protocol/persist.hpp): every field the actor computes with, beside the struct so that a
// field added above is added here too. Not kept: the wiring (env, dir), the snapshot agent,
// and scratch that every use overwrites.
// Loading: the live learners' handles, range checks, scratch buffers (actors/state_io.cpp).
void after_load(shard_state& x, const std::vector<uint32_t>& live);
template <class F>
void persist_fields(F& f, pending_delta& x) {
  f(x.blobs, x.tokens, x.steps, x.base_version, x.send_step, x.send_steps, x.deadline_ns,
    x.arrived_ns, x.bytes, x.uplink_ns, x.overlap_steps);
}

template <class F>
void persist_fields(F& f, upstream_send& x) {
  f(x.send_step, x.sent_ns, x.learners, x.bases, x.steps, x.bytes, x.held);
}

template <class F>
void persist_fields(F& f, owned_fragment& x) {
  f(x.id, x.global, x.momentum, x.round_share, x.round_delta, x.expected_weight, x.shares_merged,
    x.share_marks, x.down_residual, x.version, x.history, x.pending, x.last_send, x.merge_log,
    x.learner_version, x.finals, x.round, x.armed, x.flushed, x.has_copy, x.copy_version, x.copy,
    x.merges_since_recovery, x.recovered, x.recovered_version, x.momentum_restored,
    x.armed_until_ns, x.in_flight, x.up_residual, x.mirrored, x.held);
}

template <class F>
void persist_fields(F& f, shard_state& x) {
  // The live learners as slot numbers (their handles come from the directory on loading).
  std::vector<uint32_t> live;
  if constexpr (!F::loading) {
    for (const auto& entry : x.live) live.push_back(entry.first);
  }
  // The phase as two flags (alive, recovering), as snapshots have kept it.
  bool alive = x.alive(), recovering = x.recovering();
  f(x.incarnation, x.out, alive, x.owned, x.slot_of, live, x.last_send_step, x.counters,
    x.latency_ns_ema, x.flushed_reported, recovering, x.held_deltas, x.in_service, x.held_pulls,
    x.held_dropped, x.step_time_ns, x.join_delay_ns, x.last_arrival_ns, x.upstream_down,
    x.upstream_incarnation, x.up_send_step, x.up_round_ns_ema, x.upstream_joined, x.departed,
    x.schedule_change, x.pace_samples, x.up_last_reply_ns);
  if constexpr (F::loading) {
    x.phase = !alive       ? shard_phase::down
              : recovering ? shard_phase::recovering
                           : shard_phase::serving;
    after_load(x, live);
  }
}

// Shard slot `index`. Its first process starts at start_msg with the initial model; a restart
// (restart_msg after a kill_msg) rebuilds the fragments from the learners' copies.
shard_actor::behavior_type syncer(shard_actor::stateful_pointer<shard_state> self,
                                  std::shared_ptr<const actor_env> env, uint32_t index,
                                  directory_ptr dir);

// How long a restarted shard collects copies before it serves.
int64_t recovery_window_ns(const run_config& config);

// The grace window (docs/architecture.md, "Quorum and grace"), in nanoseconds from now: gamma
// times the slack, clamped to [0, cap]. The slack is tau times the slowest live learner's step
// time less the time the round has waited for its quorum (since its first delta arrived) and
// the transfer time t_sync; and never more than the tightest contributor allows: learner i
// mixes the reply at its deadline d_i (tau steps after the step its delta was due at), so the
// reply must leave by d_i - t_sync, and waiting never makes a contributor's reply late.
struct grace_inputs {
  int64_t now_ns = 0;
  int64_t t_sync_ns = 0;
  int64_t round_start_ns = 0;   // the round's first delta arrived
  int64_t slowest_step_ns = 0;  // the live learners' slowest step time (0: none known yet)
  uint32_t tau = 0;
  std::vector<int64_t> deadlines_ns;  // of the deltas in
  double gamma = 0.8;
  int64_t cap_ns = 0;
};
int64_t grace_window_ns(const grace_inputs& in);

}  // namespace diloco
