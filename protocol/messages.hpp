// Every message the actors exchange, as plain structs with a CAF `inspect`.
//
// Each message that crosses between actors carries a `stamp`: the sender's actor index, its
// vector clock after the send tick, and its clock time at sending (virtual in simulation).
// Each message carries what its receiver needs to validate it (fragment, learner, versions,
// counts, and the blob's own header). Timer messages an actor sends itself carry no stamp.
// No behavior lives here; the actors validate and act (actors/).
#pragma once

#include <caf/actor.hpp>
#include <caf/meta/type_name.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/tensor_blob.hpp"
#include "protocol/vector_clock.hpp"

namespace diloco {

struct stamp {
  uint32_t sender = 0;
  vector_clock clock;
  int64_t sent_at_ns = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stamp& x) {
  return f(caf::meta::type_name("stamp"), x.sender, x.clock, x.sent_at_ns);
}

// learner -> fragment scheduler and -> each syncer shard: I am (back) in the run.
struct join_msg {
  stamp st;
  uint32_t learner = 0;
  bool rejoin = false;  // a restarted learner: shards answer with full fragments
};

// fragment scheduler -> learner: when each fragment is due.
struct schedule_msg {
  stamp st;
  uint32_t period_steps = 0;      // H
  uint32_t overlap_steps = 0;     // tau
  std::vector<uint32_t> offsets;  // per fragment, in [0, H)
  bool global_clock = true;       // steps of the shared clock, or the learner's own
  int64_t epoch_ns = 0;           // global step 0 starts here (scheduler's clock)
  int64_t step_ns = 0;            // one global step
  // Adaptive inner steps (period_steps: auto): the scheduler's `change`-th choice of H, which
  // applies from schedule step `from_step` on (offsets counted from there). 0 and 0: the
  // schedule of the run's start.
  uint64_t from_step = 0;
  uint32_t change = 0;
};

// learner -> shard: the outer gradient of one fragment (Decoupled and synchronous DiLoCo).
struct outer_gradient_msg {
  stamp st;
  uint32_t fragment = 0;
  uint32_t learner = 0;
  uint64_t base_version = 0;  // global version the delta is relative to
  uint64_t tokens = 0;        // work behind the delta: tokens ...
  uint64_t steps = 0;         // ... and inner steps
  uint64_t send_step = 0;     // schedule step the fragment was due at
  int64_t step_time_ns = 0;   // learner's recent mean step time
  int64_t deadline_ns = 0;    // when the learner will mix the reply (tau steps after send_step)
  bool final = false;         // the learner's last delta of the run
  tensor_blob delta;
  uint32_t overlap_steps = 0;  // adaptive inner steps only: the tau it follows (0 otherwise)
};

// shard -> learner: the global fragment moved from `from_version` to `to_version`. Either the
// encoded outer updates of each version in between (the learner adds them to its copy of
// version `from_version`), or, when `full`, one fp32 blob of the whole fragment.
struct fragment_update_msg {
  stamp st;
  uint32_t fragment = 0;
  uint64_t from_version = 0;
  uint64_t to_version = 0;
  uint64_t reply_to_step = 0;  // the learner's send_step this answers (0: a pull)
  bool full = false;
  std::vector<tensor_blob> blobs;
  // Adaptive inner steps only (0 otherwise): how long the answered outer gradient took from
  // its send to the shard, and the learner's latency to the shard as its join measured it (a
  // message too small to take any transfer time; 0: not known).
  int64_t uplink_ns = 0;
  int64_t latency_ns = 0;
};

// learner -> shard: send me the whole current fragment (rejoin, or a gap in the versions).
struct pull_msg {
  stamp st;
  uint32_t learner = 0;
  uint32_t fragment = 0;
};

// Data-parallel baseline: learner -> shard, one fragment of a step's gradient.
struct gradient_msg {
  stamp st;
  uint32_t fragment = 0;
  uint32_t learner = 0;
  uint64_t step = 0;
  tensor_blob grad;
};

// Data-parallel baseline: shard -> learners, the mean gradient of a fragment for a step.
struct reduced_gradient_msg {
  stamp st;
  uint32_t fragment = 0;
  uint64_t step = 0;
  uint32_t contributors = 0;
  tensor_blob grad;
};

// learner -> metrics: work since the previous report.
struct progress_msg {
  stamp st;
  uint32_t learner = 0;
  uint64_t tokens = 0;  // since the previous report
  uint64_t steps = 0;
  double train_loss = 0.0;  // mean batch loss over those steps
  int64_t busy_ns = 0;      // computing, since the previous report
  int64_t idle_ns = 0;      // waiting on a merge or a reduction
  double chip_s = 0.0;      // chip-seconds of computing (chips x capacity x time), since then
  uint64_t bytes_sent = 0;  // since the previous report
  uint64_t bytes_received = 0;
  // Merges of global fragments since then: the sum of (loss of the step after the merge -
  // loss of the step before) / loss before, and how many.
  double merge_gap_sum = 0.0;
  uint64_t merge_gaps = 0;
  uint32_t period_steps = 0;   // adaptive inner steps only: the H it follows now (0 otherwise)
  uint32_t overlap_steps = 0;  // and its tau
};

// learner -> fragment scheduler (adaptive inner steps only): what it measured of its links and
// its steps since its previous report, from its outer gradients and the replies to them.
struct pace_msg {
  stamp st;
  uint32_t learner = 0;
  uint32_t change = 0;        // the schedule change it measured under
  int64_t step_ns = 0;        // one schedule step: the shared clock's, or its own steps
  double bits_per_ns = 0.0;   // its links' bandwidth (Gbit/s)
  int64_t latency_ns = 0;     // one way
  uint64_t period_bytes = 0;  // the most one of its links carries per period, one way
  int64_t round_ns = 0;       // a fragment's round without queues (pace.hpp)
};

// metrics -> learners: the token budget is spent; flush and stop.
struct stop_msg {
  stamp st;
};

// learner -> metrics: its loss or its outer gradient went non-finite (NaN or Inf); the learner
// stopped contributing (its process ended as after a failure). `what` says where: the step's
// loss, or the first tensor with a non-finite value.
struct diverged_msg {
  stamp st;
  uint32_t learner = 0;
  uint64_t step = 0;
  std::string what;
};

// shard -> metrics: every fragment of the shard had its final merge.
struct flushed_msg {
  stamp st;
  uint32_t shard = 0;
};

// shard -> metrics: one merge of a fragment (the monitoring of docs/observability.md). Per
// contributor: its learner, token weight, arrival delay after the round opened (first delta
// in), and how many versions behind the global its delta's base was.
struct merge_msg {
  stamp st;
  uint32_t shard = 0;
  uint32_t fragment = 0;
  uint64_t version = 0;  // after the merge
  bool quorum = false;   // reached the quorum (false: the final flush)
  uint32_t live = 0;     // live learners the shard knew at the merge
  std::vector<uint32_t> learners;
  std::vector<uint64_t> tokens;
  std::vector<int64_t> delays_ns;
  std::vector<uint64_t> version_gaps;
  uint64_t delta_bytes = 0;  // encoded bytes of the merged deltas
  uint64_t fp32_bytes = 0;   // the same deltas as fp32
  // Per non-embedding tensor of the fragment (its index in the layout): the mean cosine between
  // the merged deltas (tensor/merge.hpp, tensor_agreement). Empty with fewer than two.
  std::vector<uint32_t> tensors;
  std::vector<float> cosines;
  // The shard's running counts (the metrics actor takes differences).
  uint64_t dropped_stale = 0, dropped_duplicate = 0, rejected = 0;
};

// Timers an actor sets for itself.
struct step_tick {
  uint64_t seq = 0;
};
struct grace_tick {
  uint32_t fragment = 0;
  uint64_t round = 0;
  uint32_t incarnation = 0;  // of the shard process that armed it
};
// The supervisor's own timer: failure event `event` starts (restart = false) or ends.
struct fault_tick {
  uint32_t event = 0;
  bool restart = false;
};

// The supervisor's timer for random interruptions of learner `learner`.
enum class chaos_event : uint8_t { failure = 0, restart = 1, repair = 2 };
struct chaos_tick {
  uint32_t learner = 0;
  chaos_event kind = chaos_event::failure;
  uint32_t incarnation = 0;  // restart/repair ticks of an older incarnation are void
};

// chaos -> an elastic learner: pause for `pause_ns`, then compute at `capacity` (share of its
// chips that work).
struct capacity_msg {
  stamp st;
  double capacity = 1.0;
  int64_t pause_ns = 0;
};

// The metrics actor's own timer: the run's duration is over.
struct deadline_tick {};

// chaos -> learner: your capacity is taken back; send your outstanding work and exit.
struct leave_msg {
  stamp st;
};

// chaos (simulation) or the restarted shard itself (deployment) -> learners: shard `shard` is
// back (a new process, incarnation `incarnation`).
struct peer_msg {
  stamp st;
  uint32_t shard = 0;
  uint32_t incarnation = 0;
};

// Harness -> every actor, once the whole cluster is spawned and wired: begin, fresh or (when
// `restore` holds the actor's part of a snapshot) from where the snapshot left it. A deployed
// node whose process was restarted mid-run starts its actors with `incarnation` > 0: a learner
// rejoins from the shards' global model, a shard recovers (hosts/deploy.cpp).
struct start_msg {
  tensor_blob restore;
  uint32_t incarnation = 0;
};

// A deployed node's runtime -> its own actors: the actor of slot `index` is now `handle` (the
// node that runs it was restarted, so the old proxy is dead). Each actor copies its directory
// and swaps the copy in (on_rewire, runtime/directory.hpp): no directory is written while
// another actor may read it. Never crosses the network.
struct rewire_msg {
  uint32_t index = 0;
  caf::actor handle;
};

// Chandy-Lamport: the marker of snapshot `snapshot` on the channel from actor `sender`.
// Markers are not events of the computation: they carry no stamp, tick no clock and leave
// every trace as it was.
struct marker_msg {
  uint32_t sender = 0;
  uint64_t snapshot = 0;
};

// An actor -> the snapshot coordinator: its part of snapshot `snapshot` (its state at the cut,
// its pending timers and the messages recorded on its incoming channels), encoded
// (runtime/snapshot.cpp), and a one-line summary for `diloco inspect`.
struct snapshot_part {
  uint64_t snapshot = 0;
  uint32_t index = 0;
  int64_t cut_tick = 0;
  std::string summary;
  std::vector<tensor_blob> payload;  // the part's bytes in order, in pieces (empty: none)
};

// metrics (every N steps) or the harness (on demand) -> snapshot coordinator: take one.
struct snapshot_request {
  stamp st;
  uint64_t steps = 0;  // cluster steps so far (0: on demand)
};

// The coordinator's own timer: a periodic snapshot is due.
struct snapshot_tick {
  uint64_t seq = 0;
};

// chaos -> a learner or shard: the host under you failed. The slot keeps its actor (so the
// actor graph is fixed and snapshots see every channel), which drops everything until a
// restart_msg brings a fresh process.
struct kill_msg {
  stamp st;
};

// chaos -> a learner or shard slot: a fresh process (incarnation `incarnation`) starts here.
// For a learner slot that never ran, or that left, this is a join.
struct restart_msg {
  stamp st;
  uint32_t incarnation = 0;
};

// A learner or shard whose process ends (killed, or a learner leaving) -> its peers, after
// everything it sent before on each link: the connection is gone. What failure detection
// sees in a deployment, in the order a FIFO link gives it.
struct closed_msg {
  stamp st;
  uint32_t incarnation = 0;  // of the process that ended
};

// A restarted shard -> learner: send me your copies of these fragments.
struct copy_request {
  stamp st;
  std::vector<uint32_t> fragments;
};

// learner -> shard: my copy of a fragment's global value (fp32; empty in the cost model).
struct copy_msg {
  stamp st;
  uint32_t fragment = 0;
  uint32_t learner = 0;
  uint64_t version = 0;
  tensor_blob value;
};

// A restarted shard's own timer: stop collecting copies and serve (void for a later process).
struct recovery_tick {
  uint32_t incarnation = 0;
};

// A shard's own timer when merging has a modelled cost in simulated time (debug.slow_shard_s):
// the outer gradient at the head of its service queue is done (void for a later process).
struct service_tick {
  uint32_t incarnation = 0;
};

// The supervisor's timers for membership changes and shard restarts (index into the config's
// lists; `restart`: the shard comes back).
struct membership_tick {
  uint32_t event = 0;
};
struct shard_tick {
  uint32_t event = 0;
  bool restart = false;
};

// Harness -> actor queries at the end of a run (and for monitoring).
struct report_request {};

struct learner_report {
  uint32_t learner = 0;
  uint64_t tokens = 0;
  uint64_t steps = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_sent = 0;
  int64_t busy_ns = 0;
  int64_t idle_ns = 0;
  uint64_t late_updates = 0;  // updates applied after their tau deadline
  uint64_t rejected_messages = 0;
  uint32_t incarnation = 0;  // restarts so far
  double last_loss = 0.0;
  uint64_t trace = 0;                   // hash of everything this actor received, in order
  std::vector<uint64_t> versions;       // per fragment: the version of this learner's global copy
  std::vector<uint64_t> global_hashes;  // per fragment: checksum of that copy
  uint64_t lost_deltas_network = 0;     // outer gradients its links lost
  uint64_t lost_deltas_partition = 0;
  uint64_t lost_deltas_shard_down = 0;  // sent to a shard that died before answering
  uint64_t version_regressions = 0;     // invariant: an update older than the copy (never expected)
  uint64_t duplicate_updates = 0;       // repeated replies, ignored
  uint64_t resyncs = 0;                 // pulls after waiting too long for a reply
  uint64_t deltas_held = 0;             // due sends held back by max_unanswered_deltas
  // Per fragment: the version this learner held when the fragment's shard last went away (a
  // restarted shard must recover at least that: version accounting, check_invariants).
  std::vector<uint64_t> versions_at_shard_loss;
  uint64_t reported_bytes = 0;  // of bytes_sent + bytes_received, those already in progress reports
};

struct shard_report {
  uint32_t shard = 0;
  uint64_t merges = 0;
  uint64_t deltas_merged = 0;
  uint64_t deltas_late = 0;      // arrived after their round merged: went to the next merge
  uint64_t deltas_combined = 0;  // a learner's second delta joined its pending one
  uint64_t deltas_dropped_stale = 0;
  uint64_t rejected_messages = 0;  // failed validation
  uint64_t grace_windows = 0;
  int64_t grace_ns_total = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t quorum_merges = 0;      // merges triggered by the quorum (not by the final flush)
  std::vector<uint64_t> versions;  // per owned fragment
  uint64_t trace = 0;
  std::vector<uint64_t> global_hashes;  // per owned fragment: checksum of the global value
  uint64_t deltas_received = 0;         // outer gradients with work that arrived
  uint64_t deltas_dropped_duplicate = 0;
  uint64_t deltas_rejected = 0;  // of the rejected messages, outer gradients
  uint64_t deltas_invalid = 0;   // of those, arrived with work but failed decoding
  uint64_t merges_refused = 0;   // merges whose outer step was not finite (global kept)
  uint64_t double_merges = 0;    // invariant: a send merged twice (never expected)
  uint64_t sends_merged = 0;     // learners' sends in the merges (combined ones each count)
  uint64_t pending_at_end = 0;
  uint64_t deltas_lost_in_crash = 0;  // pending or held when the shard's process was killed
  // Real time: most messages waiting when a delta was taken; simulated with a merge cost
  // (debug.slow_shard_s): most outer gradients waiting behind the one in service.
  uint64_t mailbox_peak = 0;
  uint32_t incarnation = 0;  // the shard's process that reports
  // Per owned fragment, the version its latest recovery from the learners' copies ended at
  // (empty: the process never recovered).
  std::vector<uint64_t> recovered_versions;
  uint64_t snapshot = 0;  // the snapshot whose part the process started from (deployed restart)
};

// Harness -> shard: the global values of its fragments (fp32 blobs, by fragment). To a learner
// with `evaluate`: also the evaluation loss of its copy of the global model (a deployed run's
// leader that cannot run a PyTorch model asks a learner node to evaluate the final model).
struct global_request {
  bool evaluate = false;
};
struct global_snapshot {
  std::vector<uint32_t> fragments;
  std::vector<uint64_t> versions;
  std::vector<tensor_blob> values;
  double eval_loss = 0.0;  // asked with evaluate: the loss, NaN if the learner could not
  std::string eval_error;  // why not
};

#define DILOCO_INSPECT(type, ...)                                  \
  template <class Inspector>                                       \
  typename Inspector::result_type inspect(Inspector& f, type& x) { \
    return f(caf::meta::type_name(#type), __VA_ARGS__);            \
  }

DILOCO_INSPECT(join_msg, x.st, x.learner, x.rejoin)
DILOCO_INSPECT(schedule_msg, x.st, x.period_steps, x.overlap_steps, x.offsets, x.global_clock,
               x.epoch_ns, x.step_ns, x.from_step, x.change)
DILOCO_INSPECT(outer_gradient_msg, x.st, x.fragment, x.learner, x.base_version, x.tokens, x.steps,
               x.send_step, x.step_time_ns, x.deadline_ns, x.final, x.delta, x.overlap_steps)
DILOCO_INSPECT(fragment_update_msg, x.st, x.fragment, x.from_version, x.to_version, x.reply_to_step,
               x.full, x.blobs, x.uplink_ns, x.latency_ns)
DILOCO_INSPECT(pull_msg, x.st, x.learner, x.fragment)
DILOCO_INSPECT(gradient_msg, x.st, x.fragment, x.learner, x.step, x.grad)
DILOCO_INSPECT(reduced_gradient_msg, x.st, x.fragment, x.step, x.contributors, x.grad)
DILOCO_INSPECT(progress_msg, x.st, x.learner, x.tokens, x.steps, x.train_loss, x.busy_ns, x.idle_ns,
               x.chip_s, x.bytes_sent, x.bytes_received, x.merge_gap_sum, x.merge_gaps,
               x.period_steps, x.overlap_steps)
DILOCO_INSPECT(pace_msg, x.st, x.learner, x.change, x.step_ns, x.bits_per_ns, x.latency_ns,
               x.period_bytes, x.round_ns)
DILOCO_INSPECT(capacity_msg, x.st, x.capacity, x.pause_ns)
DILOCO_INSPECT(stop_msg, x.st)
DILOCO_INSPECT(flushed_msg, x.st, x.shard)
DILOCO_INSPECT(diverged_msg, x.st, x.learner, x.step, x.what)
DILOCO_INSPECT(merge_msg, x.st, x.shard, x.fragment, x.version, x.quorum, x.live, x.learners,
               x.tokens, x.delays_ns, x.version_gaps, x.delta_bytes, x.fp32_bytes, x.dropped_stale,
               x.dropped_duplicate, x.rejected, x.tensors, x.cosines)
DILOCO_INSPECT(step_tick, x.seq)
DILOCO_INSPECT(grace_tick, x.fragment, x.round, x.incarnation)
DILOCO_INSPECT(fault_tick, x.event, x.restart)
DILOCO_INSPECT(leave_msg, x.st)
DILOCO_INSPECT(peer_msg, x.st, x.shard, x.incarnation)
DILOCO_INSPECT(kill_msg, x.st)
DILOCO_INSPECT(restart_msg, x.st, x.incarnation)
DILOCO_INSPECT(closed_msg, x.st, x.incarnation)
DILOCO_INSPECT(recovery_tick, x.incarnation)
DILOCO_INSPECT(service_tick, x.incarnation)
DILOCO_INSPECT(start_msg, x.restore, x.incarnation)
DILOCO_INSPECT(rewire_msg, x.index, x.handle)
DILOCO_INSPECT(marker_msg, x.sender, x.snapshot)
DILOCO_INSPECT(snapshot_part, x.snapshot, x.index, x.cut_tick, x.summary, x.payload)
DILOCO_INSPECT(snapshot_request, x.st, x.steps)
DILOCO_INSPECT(snapshot_tick, x.seq)
DILOCO_INSPECT(copy_request, x.st, x.fragments)
DILOCO_INSPECT(copy_msg, x.st, x.fragment, x.learner, x.version, x.value)
DILOCO_INSPECT(membership_tick, x.event)
DILOCO_INSPECT(shard_tick, x.event, x.restart)
DILOCO_INSPECT(chaos_tick, x.learner, x.kind, x.incarnation)
DILOCO_INSPECT(learner_report, x.learner, x.tokens, x.steps, x.bytes_sent, x.bytes_received,
               x.messages_sent, x.busy_ns, x.idle_ns, x.late_updates, x.rejected_messages,
               x.incarnation, x.last_loss, x.trace, x.versions, x.global_hashes,
               x.lost_deltas_network, x.lost_deltas_partition, x.lost_deltas_shard_down,
               x.version_regressions, x.duplicate_updates, x.resyncs, x.deltas_held,
               x.versions_at_shard_loss, x.reported_bytes)
DILOCO_INSPECT(shard_report, x.shard, x.merges, x.deltas_merged, x.deltas_late, x.deltas_combined,
               x.deltas_dropped_stale, x.rejected_messages, x.grace_windows, x.grace_ns_total,
               x.bytes_sent, x.bytes_received, x.quorum_merges, x.versions, x.trace,
               x.global_hashes, x.deltas_received, x.deltas_dropped_duplicate, x.deltas_rejected,
               x.deltas_invalid, x.merges_refused, x.double_merges, x.sends_merged,
               x.pending_at_end, x.deltas_lost_in_crash, x.mailbox_peak, x.incarnation,
               x.recovered_versions, x.snapshot)
DILOCO_INSPECT(global_snapshot, x.fragments, x.versions, x.values, x.eval_loss, x.eval_error)

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, report_request&) {
  return f(caf::meta::type_name("report_request"));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, deadline_tick&) {
  return f(caf::meta::type_name("deadline_tick"));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, global_request& x) {
  return f(caf::meta::type_name("global_request"), x.evaluate);
}

#undef DILOCO_INSPECT

}  // namespace diloco
