// Adaptive inner steps (docs/architecture.md, "Adaptive inner steps"): what a learner (or a
// regional syncer, of its wide-area link) measures of its links to the shards, and the H the
// fragment scheduler chooses from it. Pure functions, shared by the learner, the regional
// syncer and the scheduler and unit-tested on their own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace diloco {

// One fragment's round: how long its outer gradient took on the wire to the shard (the shard
// says, in its reply) and its reply back, each without the latency and without the wait behind
// the message before it on the same link (transfer_ns); their sizes on the wire.
struct link_sample {
  uint32_t fragment = 0;
  uint32_t shard = 0;
  int64_t up_ns = 0;
  int64_t down_ns = 0;
  uint64_t up_bytes = 0;
  uint64_t down_bytes = 0;
  int64_t latency_ns = 0;      // the link's latency as a tiny message measured it (0: unknown)
  uint32_t down_versions = 1;  // updates the reply carried (from its delta's base on)
  uint32_t new_versions = 1;   // of them, new to the learner's copy (merges since its last)
  // A regional syncer's round whose deltas waited for the answer to its send before (it keeps
  // at most one per fragment on the link): they took up to two rounds to be answered.
  bool held = false;
};

template <class F>
void persist_fields(F& f, link_sample& x) {
  f(x.fragment, x.shard, x.up_ns, x.down_ns, x.up_bytes, x.down_bytes, x.latency_ns,
    x.down_versions, x.new_versions, x.held);
}

// A message's time on the wire, seen at its receiver: it arrived at `arrived_ns`, was sent at
// `sent_ns`, and the message before it on the same FIFO link arrived at `previous_ns`. It
// started out when it was sent, or when the one before it was through (previous arrival less
// the latency), whichever was later. Without a latency (0) it counts as transfer: the safe side.
int64_t transfer_ns(int64_t arrived_ns, int64_t sent_ns, int64_t previous_ns, int64_t latency_ns);

// A learner's links as its samples show them.
struct link_estimate {
  bool ok = false;            // enough samples to say anything
  double bits_per_ns = 0.0;   // bandwidth (Gbit/s)
  int64_t latency_ns = 0;     // one way
  int64_t round_ns = 0;       // a fragment's round without queues: two latencies and its
                              // bytes both ways over the bandwidth
  uint64_t period_bytes = 0;  // the most one link carries in one direction per period
};

// The links' bandwidth: the median over the samples' messages of size over time on the wire,
// or the newest round's when that is slower (a link that slows down is taken at once).
// The latency: the joins' measure (0 when none came). A fragment's round moves its outer
// gradient and one version's update; a period moves, per fragment, its outer gradient and an
// update per merge since the learner's previous reply (one when a merge gathers every learner,
// as the grace window makes it; more when merges do not; a reply that repeats versions an
// earlier one carries, because its delta left before that reply came, is the queue's doing, not
// the schedule's): each fragment's smallest in the window. `period_bytes` adds them per shard
// and direction, over the `fragments_of_shard[s]` fragments the shard owns (scaled up when some
// have no sample).
link_estimate estimate_links(const std::deque<link_sample>& samples,
                             const std::vector<uint32_t>& fragments_of_shard);

// One measured round: `reply` (a fragment_update_msg) answers the newest send of its fragment
// and arrived at `arrived_ns`, the reply before it on the same link at `previous_ns`;
// `sent_bytes` and `reply_bytes` are the send's and the reply's sizes on the wire (the caller
// applies the payload scale); the receiver's copy had `version_before`.
template <class Reply>
link_sample round_sample(const Reply& reply, uint32_t shard, int64_t arrived_ns,
                         int64_t previous_ns, uint64_t sent_bytes, uint64_t reply_bytes,
                         uint64_t version_before) {
  link_sample s;
  s.fragment = reply.fragment;
  s.shard = shard;
  s.up_ns = reply.uplink_ns;
  s.down_ns = transfer_ns(arrived_ns, reply.st.sent_at_ns, previous_ns, reply.latency_ns);
  s.up_bytes = sent_bytes;
  s.down_bytes = reply_bytes;
  s.down_versions = static_cast<uint32_t>(reply.blobs.empty() ? 1 : reply.blobs.size());
  const uint64_t fresh = reply.to_version - std::min<uint64_t>(reply.to_version, version_before);
  s.new_versions = static_cast<uint32_t>(std::clamp<uint64_t>(fresh, 1, 1u << 20));
  s.latency_ns = reply.latency_ns;
  return s;
}

// Keeps `s` among the newest rounds, a period's worth (one per fragment: a link that slows down
// shows within a period, the medians need half). Once half a period's rounds are in, what they
// show (a report per round from then on: a change shows within about half a period); not ok
// before. `shard_of`: each fragment's shard, of `shards`.
link_estimate keep_round(std::deque<link_sample>& samples, const link_sample& s,
                         const std::vector<uint32_t>& shard_of, size_t shards);

// The report's figures from an estimate (Report: pace_msg).
template <class Report>
void fill_pace(Report& m, const link_estimate& e) {
  m.bits_per_ns = e.bits_per_ns;
  m.latency_ns = e.latency_ns;
  m.period_bytes = e.period_bytes;
  m.round_ns = e.round_ns;
}

// What one learner's links ask of the schedule, in steps (step_ns: one schedule step): tau, so
// that a fragment's round fits in `target_load` of the overlap (its reply is in before it is
// due: slack >= 0); H, so that its busiest link is busy at most `target_load` of a period (no
// queue builds up), and above tau.
struct pace_need {
  double period = 0.0;
  double overlap = 0.0;
};
pace_need needed(const link_estimate& e, int64_t step_ns, double target_load);

// The schedule's H and tau, and their bounds: H in [period_lo, period_hi], tau from overlap_lo
// (the configured one) up to below H.
struct pace_choice {
  uint32_t period = 0;
  uint32_t overlap = 0;
};
struct pace_bounds {
  uint32_t period_lo = 1, period_hi = 1, overlap_lo = 0;
};

// The scheduler's choice from the largest needs among the learners: each value goes up at once
// to what is needed, and down only when the need is below `down_share` of it (so that a need
// measured near a boundary does not move it back and forth); H stays above tau.
pace_choice choose_pace(pace_choice current, pace_need need, const pace_bounds& b,
                        double down_share = 0.8);

}  // namespace diloco
