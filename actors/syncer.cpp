#include "actors/syncer.hpp"
#include "actors/pace.hpp"
#include "actors/shard_parts.hpp"
#include "base/check.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "actors/slot.hpp"
#include "actors/state_io.hpp"
#include "base/checksum.hpp"
#include "runtime/snapshot.hpp"
#include "tensor/codec.hpp"
#include "tensor/merge.hpp"
#include "tensor/optim.hpp"

namespace diloco {

int64_t grace_window_ns(const grace_inputs& in) {
  if (in.deadlines_ns.empty()) return 0;
  int64_t slack = std::numeric_limits<int64_t>::max();
  for (int64_t d : in.deadlines_ns) slack = std::min(slack, d - in.now_ns - in.t_sync_ns);
  if (in.slowest_step_ns > 0) {
    const double waited = static_cast<double>(in.now_ns - in.round_start_ns);
    const double own = static_cast<double>(in.tau) * static_cast<double>(in.slowest_step_ns) -
                       waited - static_cast<double>(in.t_sync_ns);
    slack = own < static_cast<double>(slack) ? static_cast<int64_t>(std::floor(own)) : slack;
  }
  if (slack <= 0) return 0;
  const auto g = static_cast<int64_t>(in.gamma * static_cast<double>(slack));
  return std::clamp<int64_t>(g, 0, in.cap_ns);
}

namespace shard {

const run_config& cfg(self_ptr self) {
  return self->state.env->config;
}
const fragment& frag_of(self_ptr self, uint32_t p) {
  DILOCO_CHECK(p < self->state.env->plan.fragments.size(), "syncer: a fragment index in range");
  return self->state.env->plan.fragments[p];
}

owned_fragment* find_owned(self_ptr self, uint32_t p) {
  auto& st = self->state;
  if (p >= st.slot_of.size() || st.slot_of[p] < 0) return nullptr;
  return &st.owned[static_cast<size_t>(st.slot_of[p])];
}

void reject(self_ptr self, const std::string& what) {
  ++self->state.counters.rejected_messages;
  spdlog::warn("syncer {}: rejected {}", self->state.index, what);
}

status decode_checked(const tensor_blob& blob, fspan out) {
  return decode(blob.view(), out);
}

// A shard's global values change only by decoded (finite) updates that passed merge_now's
// check, so encoding them cannot fail: a failure is a bug.
void encode_global(const float_buffer& global, std::vector<uint8_t>& out) {
  const status s = encode(codec_config::make(codec_kind::fp32),
                          cfspan(global.data(), global.size()), fspan(), out);
  DILOCO_CHECK(s.ok(), "syncer: a global fragment holds a non-finite value");
}

void send_full(self_ptr self, owned_fragment& of, const learner_actor& to, uint32_t learner,
               uint64_t reply_to_step) {
  auto& st = self->state;
  DILOCO_CHECK(
      cfg(self).compute == compute_mode::cost || of.global.size() == frag_of(self, of.id).size,
      "syncer: a whole fragment sent is as large as the fragment");
  encode_global(of.global, st.blob);
  fragment_update_msg msg;
  msg.st = st.out.make_stamp(now_ns(self));
  msg.fragment = of.id;
  msg.from_version = of.version;
  msg.to_version = of.version;
  msg.reply_to_step = reply_to_step;
  msg.full = true;
  msg.blobs.emplace_back(st.blob);
  const uint64_t bytes = st.blob.size() + message_overhead_bytes;
  post(self, over_link(st.env->ids.member(learner), to, bytes), std::move(msg));
}

// The updates from version `from` to the current one, or the whole fragment when they are no
// longer kept.
// uplink_ns: with adaptive inner steps, how long the answered send took to arrive (0: not said).
void send_reply(self_ptr self, owned_fragment& of, uint32_t learner, uint64_t from,
                uint64_t reply_to_step, int64_t uplink_ns) {
  auto& st = self->state;
  auto it = st.live.find(learner);
  if (it == st.live.end()) return;  // down: it will pull when it rejoins
  DILOCO_CHECK(of.history.size() <= of.version, "syncer: no more updates kept than versions made");
  const uint64_t kept_from = of.version - of.history.size();
  of.learner_version[learner] = of.version;  // what it will have once this arrives
  if (from < kept_from) {
    send_full(self, of, it->second, learner, reply_to_step);
    return;
  }
  fragment_update_msg msg;
  msg.st = st.out.make_stamp(now_ns(self));
  msg.fragment = of.id;
  msg.from_version = from;
  msg.to_version = of.version;
  msg.reply_to_step = reply_to_step;
  if (cfg(self).period_auto.enabled) {
    msg.uplink_ns = uplink_ns;
    if (auto j = st.join_delay_ns.find(learner); j != st.join_delay_ns.end())
      msg.latency_ns = j->second;
  }
  DILOCO_CHECK(from <= of.version, "syncer: a reply starts at a version this shard made");
  uint64_t bytes = message_overhead_bytes;
  const bool cost = cfg(self).compute == compute_mode::cost;
  const uint64_t modeled =
      cost ? encoded_bytes(codec_config::make(cfg(self).downlink), frag_of(self, of.id).size) : 0;
  for (uint64_t v = from; v < of.version; ++v) {
    msg.blobs.push_back(of.history[v - kept_from]);
    bytes += cost ? modeled : msg.blobs.back().size();
  }
  post(self, over_link(st.env->ids.member(learner), it->second, bytes), std::move(msg));
}

void report_flushed_if_done(self_ptr self) {
  auto& st = self->state;
  // A regional syncer's final merges go to the shards, which report theirs.
  if (st.flushed_reported || is_regional(st)) return;
  for (const auto& of : st.owned) {
    if (!of.flushed) return;
  }
  st.flushed_reported = true;
  flushed_msg msg{st.out.make_stamp(now_ns(self)), st.index};
  post(self, direct(st.env->ids.metrics(), st.dir->metrics), std::move(msg));
}

namespace {
// A pending delta into the grace window's summary (`counted`: it had steps when last folded).
void fold_pending(owned_fragment::pending_summary& sum, const pending_delta& pd, bool counted) {
  sum.contributors += !counted && pd.steps > 0 ? 1 : 0;
  sum.min_deadline_ns = std::min(sum.min_deadline_ns, pd.deadline_ns);
  sum.min_arrived_ns = std::min(sum.min_arrived_ns, pd.arrived_ns);
  sum.max_overlap = std::max(sum.max_overlap, pd.overlap_steps);
}
}  // namespace

void release_pending(shard_state&, owned_fragment& of) {
  of.pending.clear();
  of.pending_sum = owned_fragment::pending_summary{};
  of.pending_sum.valid = true;
}

// A pending delta's values: its outer gradients decoded and summed in arrival order, into a
// buffer from the pool (the caller hands it back). Each was decoded once on arrival already.
float_buffer decode_pending(shard_state& st, const pending_delta& pd, size_t n) {
  DILOCO_CHECK(!pd.blobs.empty(), "syncer: a pending delta holds an outer gradient");
  // Every pool buffer is the largest fragment's size, so that M of them serve every fragment.
  DILOCO_CHECK(n <= st.decoded.size(), "syncer: a fragment no larger than the largest");
  float_buffer values = take_spare(st.spare, st.decoded.size());
  const status first = decode_checked(pd.blobs.front(), fspan(values.data(), n));
  DILOCO_CHECK(first.ok(), "syncer: a pending outer gradient decodes as it did on arrival");
  float* v = values.data();
  const float* d = st.decoded.data();
  for (size_t b = 1; b < pd.blobs.size(); ++b) {
    // The learner measured this delta from its previous send: the work adds up.
    const status s = decode_checked(pd.blobs[b], fspan(st.decoded.data(), n));
    DILOCO_CHECK(s.ok(), "syncer: a pending outer gradient decodes as it did on arrival");
    for (size_t i = 0; i < n; ++i) v[i] += d[i];
  }
  return values;
}

// Invariant check, independent of the duplicate filter: every merged send goes into a log of
// (learner, schedule step); finding one there already means a delta was merged twice.
void log_merged_sends(shard_state& st, owned_fragment& of, uint32_t learner,
                      const pending_delta& pd) {
  DILOCO_CHECK(!pd.send_steps.empty(), "syncer: a pending delta holds at least one send");
  auto& log = of.merge_log[learner];
  auto [top, fresh] = of.merge_log_max.try_emplace(learner, 0);
  if (fresh && !log.empty()) top->second = *std::max_element(log.begin(), log.end());
  for (uint64_t step : pd.send_steps) {
    const bool newest = log.empty() || step > top->second;
    top->second = std::max(top->second, step);
    if (!newest && std::find(log.begin(), log.end(), step) != log.end()) {
      st.counters.double_merges += 1;
      spdlog::error(
          "syncer {}: invariant violated: send of learner {} at step {} merged twice into fragment "
          "{}",
          st.index, learner, step, of.id);
    }
    log.push_back(step);
    while (log.size() > merge_log_depth) log.pop_front();
  }
  st.counters.sends_merged += pd.send_steps.size();
}

// The global value moved by `update`: a new version, kept in the history for replies.
void advance_version(self_ptr self, owned_fragment& of, tensor_blob update, size_t merged,
                     bool final, double share) {
  auto& st = self->state;
  DILOCO_CHECK(merged > 0, "syncer: a merge takes at least one delta");
  DILOCO_CHECK(of.history.size() <= static_cast<size_t>(cfg(self).staleness_max),
               "syncer: at most staleness_max updates are kept");
  DILOCO_CHECK(share >= 0.0 && share <= 1.0, "syncer: a merge moves the global by at most a round");
  of.share_marks.push_back(of.shares_merged);
  while (of.share_marks.size() > static_cast<size_t>(cfg(self).staleness_max))
    of.share_marks.pop_front();
  of.shares_merged += share;
  of.version += 1;
  of.merges_since_recovery += 1;
  of.history.push_back(std::move(update));
  while (of.history.size() > static_cast<size_t>(cfg(self).staleness_max)) of.history.pop_front();
  st.counters.merges += 1;
  st.counters.deltas_merged += merged;
  if (!final) st.counters.quorum_merges += 1;
}

// Tells the metrics actor about a merge: who was in it, their weight, lateness and staleness.
void report_merge(self_ptr self, const owned_fragment& of, bool final,
                  const std::vector<std::pair<uint32_t, const pending_delta*>>& contributors,
                  const std::vector<tensor_agreement>& agreement = {}) {
  auto& st = self->state;
  DILOCO_CHECK(!contributors.empty(), "syncer: a merge reported has contributors");
  const int64_t now = now_ns(self);
  merge_msg m;
  m.st = st.out.make_stamp(now);
  m.shard = st.index;
  m.fragment = of.id;
  m.version = of.version;
  m.quorum = !final;
  m.live = static_cast<uint32_t>(st.live.size());
  int64_t opened = INT64_MAX;
  for (const auto& [learner, pd] : contributors) {
    // merge_now took only deltas based on versions made before it, and advance_version made one.
    DILOCO_CHECK(pd->base_version < of.version && pd->arrived_ns <= now,
                 "syncer: a merged delta came before the merge, based on an earlier version");
    opened = std::min(opened, pd->arrived_ns);
  }
  const uint64_t fp32 = uint64_t{frag_of(self, of.id).size} * sizeof(float);
  for (const auto& [learner, pd] : contributors) {
    m.learners.push_back(learner);
    m.tokens.push_back(pd->tokens);
    m.delays_ns.push_back(pd->arrived_ns - opened);
    m.version_gaps.push_back(of.version - 1 - pd->base_version);
    m.delta_bytes += pd->bytes;
    m.fp32_bytes += fp32 * pd->send_steps.size();
  }
  for (const auto& a : agreement) {
    m.tensors.push_back(a.tensor);
    m.cosines.push_back(a.cosine);
  }
  m.dropped_stale = st.counters.deltas_dropped_stale;
  m.dropped_duplicate = st.counters.deltas_dropped_duplicate;
  m.rejected = st.counters.deltas_rejected;
  post(self, direct(st.env->ids.metrics(), st.dir->metrics), std::move(m));
}

// Rounds the global has moved since version `base`: the shares merged since. Versions older
// than the marks kept (staleness_max of them, or made before a recovery) count as a merge of
// one delta in a round of every live learner.
double rounds_since(const owned_fragment& of, uint64_t base, size_t live) {
  DILOCO_CHECK(base <= of.version, "syncer: a delta's base is a version made");
  const uint64_t behind = of.version - base;
  const size_t kept = of.share_marks.size();
  if (behind <= kept) return of.shares_merged - of.share_marks[kept - behind];
  const double older =
      static_cast<double>(behind - kept) / static_cast<double>(std::max<size_t>(live, 1));
  return of.shares_merged - (kept > 0 ? of.share_marks.front() : of.shares_merged) + older;
}

// The share of its round's expected weight that a merge carries (docs/architecture.md,
// "Partial merges"): its contributors' token weight over theirs plus what each other live
// learner is expected to bring (its weight in its latest merge of this fragment; one not merged
// yet, the contributors' mean). Exactly 1 when every live learner is in the merge with a delta
// based on the current version. A delta based on a version the global has moved r rounds past
// counts (1 + r)^-decay of its weight: part of its direction is in the global already.
double merge_share(const shard_state& st, owned_fragment& of, double decay,
                   const std::vector<merge_input>& inputs,
                   const std::vector<std::pair<uint32_t, const pending_delta*>>& contributors) {
  DILOCO_CHECK(!inputs.empty() && inputs.size() == contributors.size(),
               "syncer: one weight per contributor of a merge");
  double merged = 0.0;
  double current = 0.0;  // the weight, with each delta discounted by how late it is
  std::set<uint32_t> in_merge;
  for (size_t i = 0; i < contributors.size(); ++i) {
    const uint64_t base = contributors[i].second->base_version;
    merged += inputs[i].weight;
    current +=
        base == of.version
            ? inputs[i].weight
            : inputs[i].weight * std::pow(1.0 + rounds_since(of, base, st.live.size()), -decay);
    in_merge.insert(contributors[i].first);
    of.expected_weight[contributors[i].first] = inputs[i].weight;
  }
  const double mean = merged / static_cast<double>(inputs.size());
  double others = 0.0;
  for (const auto& [learner, handle] : st.live) {
    if (in_merge.count(learner) > 0) continue;
    const auto known = of.expected_weight.find(learner);
    others += known == of.expected_weight.end() ? mean : known->second;
  }
  DILOCO_CHECK(merged > 0.0 && others >= 0.0 && current > 0.0 && current <= merged,
               "syncer: token weights are positive, and discounting only lowers them");
  if (others == 0.0 && current == merged) return 1.0;
  return current / (merged + others);
}

// The outer step of a merge into `update`. A merge that is a whole round (every live learner,
// nothing merged yet this round) is one Nesterov step; otherwise it moves the global by its
// share of one, and the momentum advances once the round's merges add up to a whole one.
void outer_step(const run_config& c, owned_fragment& of, double share, cfspan merged,
                fspan update) {
  DILOCO_CHECK(share > 0.0 && share <= 1.0, "syncer: a merge's share of its round is in (0, 1]");
  DILOCO_CHECK(merged.size() == update.size(), "syncer: the merged delta and the update alike");
  // merged and update may be one buffer (merge_now): nesterov_step and nesterov_partial_step
  // read delta[i] before they write update[i].
  if (share >= 1.0 && of.round_share == 0.0) {
    nesterov_step(update, of.momentum.all(), merged, c.outer);
    return;
  }
  nesterov_partial_step(update, of.momentum.all(), of.round_delta.all(), merged, share, c.outer);
  of.round_share += share;
  if (of.round_share >= 1.0 - 1e-9) {
    nesterov_commit_round(of.momentum.all(), of.round_delta.all(), c.outer);
    of.round_share = 0.0;
  }
  DILOCO_CHECK(of.round_share < 1.0, "syncer: a round's merges commit once they add up to one");
}

// Merge the pending deltas of a fragment, take the outer step, answer the contributors.
void merge_now(self_ptr self, owned_fragment& of, bool final) {
  auto& st = self->state;
  DILOCO_CHECK(!of.flushed, "syncer: no merge after a fragment's final one");
  DILOCO_CHECK(st.alive() && !st.recovering(), "syncer: only a live, recovered shard merges");
  if (is_regional(st)) {
    regional_merge(self, of, final);
    return;
  }
  const fragment& f = frag_of(self, of.id);
  const size_t n = f.size;
  const bool cost = cfg(self).compute == compute_mode::cost;
  std::vector<merge_input> inputs;
  std::vector<std::pair<uint32_t, const pending_delta*>> contributors;
  // The contributors' decoded deltas: back to the pool however the merge ends.
  pooled_deltas decoded{st, {}};
  decoded.values.reserve(of.pending.size());
  for (const auto& [learner, pd] : of.pending) {
    const double w = token_weight(pd.tokens, pd.steps);
    if (w <= 0.0) continue;
    DILOCO_CHECK(pd.base_version <= of.version, "syncer: a pending delta's base is a version made");
    if (!cost) {
      decoded.values.push_back(decode_pending(st, pd, n));
      inputs.push_back({cfspan(decoded.values.back().data(), n), w});
    } else {
      inputs.push_back({cfspan(), w});
    }
    contributors.emplace_back(learner, &pd);
    log_merged_sends(st, of, learner, pd);
  }
  if (of.armed && of.armed_until_ns > now_ns(self)) {
    // Merged before its window ended (everyone came, or a tighter deadline): count the wait taken.
    st.counters.grace_ns_total -= of.armed_until_ns - now_ns(self);
  }
  of.armed = false;
  of.armed_until_ns = 0;
  ++of.round;
  if (inputs.empty()) {
    release_pending(st, of);
    return;
  }
  if (cost) {
    // The cost model moves versions and bytes, not values.
    advance_version(self, of, tensor_blob(), inputs.size(), final, 0.0);
    report_merge(self, of, final, contributors);
    if (!final) {
      for (const auto& [learner, pd] : contributors)
        send_reply(self, of, learner, pd->base_version, pd->send_step, pd->uplink_ns);
    }
    release_pending(st, of);
    return;
  }
  fspan merged(st.merged.data(), n);
  const merge_rule rule = cfg(self).merge;
  std::vector<tensor_agreement> agreement;
  if (auto s = merge_fragment(f, rule, span<const merge_input>(inputs.data(), inputs.size()),
                              merged, &agreement, st.env->merge_pool.get());
      !s.ok()) {
    // Each delta was finite on arrival, but a learner's deltas held for one merge are summed,
    // and a diverging learner's finite deltas can sum past the float range (seen in a slow
    // deployed run). Refused and counted, never merged; the global stays as it is.
    ++st.counters.merges_refused;
    spdlog::error("syncer {}: merge of fragment {} refused: {}; the global stays at version {}",
                  st.index, of.id, s.to_string(), of.version);
    release_pending(st, of);
    return;
  }
  // The outer step's update takes the merged delta's place: every loop that makes it reads
  // element i of the delta before it writes element i of the update.
  fspan update(st.merged.data(), n);
  const double share = merge_share(st, of, cfg(self).staleness_decay, inputs, contributors);
  if (final && cfg(self).final_merge == final_merge_rule::average) {
    // The run's end: the global becomes the learners' last models as merged (their deltas
    // applied whole: outer lr 1, no momentum). An outer step here would extrapolate the
    // momentum with no later merge to correct it.
    for (size_t i = 0; i < n; ++i) update[i] = -merged[i];
  } else {
    outer_step(cfg(self), of, share, merged, update);
  }
  codec_config down = codec_config::make(cfg(self).downlink);
  down.error_feedback = cfg(self).downlink != codec_kind::fp32;
  if (auto s = encode(down, update, of.down_residual.all(), st.blob); !s.ok()) {
    // Finite deltas, but the outer step overflowed (outer.lr or momentum far too large): the
    // global stays as it is rather than become NaN for every learner.
    ++st.counters.merges_refused;
    spdlog::error(
        "syncer {}: merge of fragment {} refused: its outer step is not finite ({}); the global "
        "stays at version {} (outer.lr {} and outer.momentum {} too large?)",
        st.index, of.id, s.to_string(), of.version, cfg(self).outer.lr, cfg(self).outer.momentum);
    release_pending(st, of);
    return;
  }
  // The canonical global is the sum of decoded updates, so learners that add the same blobs
  // hold bit-identical copies.
  const status own = decode(byte_view(st.blob.data(), st.blob.size()), fspan(st.decoded.data(), n));
  DILOCO_CHECK(own.ok(), "syncer: its own update does not decode");
  float* g = of.global.data();
  const float* u = st.decoded.data();
  for (size_t i = 0; i < n; ++i) g[i] += u[i];
  advance_version(self, of, tensor_blob(st.blob), inputs.size(), final, share);
  report_merge(self, of, final, contributors, agreement);
  if (!final) {
    for (const auto& [learner, pd] : contributors)
      send_reply(self, of, learner, pd->base_version, pd->send_step, pd->uplink_ns);
  }
  release_pending(st, of);
}

// Live learners that have not sent their final delta for this fragment.
bool all_finals_in(const shard_state& st, const owned_fragment& of) {
  for (const auto& [learner, handle] : st.live) {
    if (of.finals.count(learner) == 0) return false;
  }
  return true;
}

void check_flush(self_ptr self, owned_fragment& of) {
  auto& st = self->state;
  if (of.flushed || of.finals.empty() || !all_finals_in(st, of)) return;
  merge_now(self, of, true);
  DILOCO_CHECK(of.pending.empty(), "syncer: a final merge leaves nothing pending");
  of.flushed = true;
  // A regional syncer's learners get the final version when its shard's flush brings it.
  if (is_regional(st)) return;
  // Every live learner gets the final version, so all copies end equal (checked by tests).
  for (const auto& [learner, handle] : st.live) {
    const auto known = of.learner_version.find(learner);
    send_reply(self, of, learner, known == of.learner_version.end() ? 0 : known->second, 0);
  }
  report_flushed_if_done(self);
}

// Every live learner has work pending for the fragment: a grace window has no one left to wait for.
bool all_live_pending(const shard_state& st, const owned_fragment& of) {
  if (of.pending.size() < st.live.size()) return false;  // a live learner has none
  for (const auto& [learner, handle] : st.live) {
    const auto it = of.pending.find(learner);
    if (it == of.pending.end() || it->second.steps == 0) return false;
  }
  return true;
}

namespace {
// The pending deltas as the grace window reads them (rebuilt once after a load; take_delta
// keeps it as deltas come, release_pending empties it).
const owned_fragment::pending_summary& pending_view(owned_fragment& of) {
  auto& sum = of.pending_sum;
  if (sum.valid) return sum;
  sum = owned_fragment::pending_summary{};
  sum.valid = true;
  for (const auto& [learner, pd] : of.pending) fold_pending(sum, pd, false);
  return sum;
}

}  // namespace

// The live learners' slowest reported step time (0: none known), kept while neither the live
// set nor a live learner's step time changes.
int64_t slowest_live_step(shard_state& st) {
  if (st.slowest_valid) return st.slowest_live_step_ns;
  int64_t slowest = 0;
  for (const auto& [learner, handle] : st.live) {
    const auto known = st.step_time_ns.find(learner);
    if (known != st.step_time_ns.end()) slowest = std::max(slowest, known->second);
  }
  st.slowest_live_step_ns = slowest;
  st.slowest_valid = true;
  return slowest;
}

// Merges now, or arms (or moves earlier) the grace window. Called as deltas arrive and learners
// leave: each arrival may bring a tighter deadline, or complete the round.
void maybe_merge(self_ptr self, owned_fragment& of) {
  auto& st = self->state;
  if (of.flushed) return;
  // A regional syncer whose shard is down keeps its learners' work pending until it is back.
  if (is_regional(st) && upstream_down_for(st, of.id)) return;
  if (is_regional(st) && awaiting_answer(self, of)) {
    of.held = true;
    return;
  }
  const auto& sum = pending_view(of);
  const size_t contributors = sum.contributors;
  // Absent learners count for nothing: the quorum never exceeds the live learners.
  const size_t live = std::max<size_t>(1, st.live.size());
  const size_t wanted =
      is_regional(st) ? regional_quorum(st) : static_cast<size_t>(cfg(self).effective_quorum());
  const size_t quorum = std::min<size_t>(wanted, live);
  DILOCO_CHECK(quorum >= 1, "syncer: a merge waits for at least one learner");
  if (contributors < quorum) return;
  if (cfg(self).mode != run_mode::decoupled || !cfg(self).grace || all_live_pending(st, of)) {
    merge_now(self, of, false);
    return;
  }
  grace_inputs in;
  in.now_ns = now_ns(self);
  // A regional syncer's replies also wait for its shard's answer.
  in.t_sync_ns = static_cast<int64_t>(st.latency_ns_ema + st.up_round_ns_ema);
  in.round_start_ns = in.now_ns;
  // The window depends on the tightest deadline only.
  if (!of.pending.empty()) {
    in.deadlines_ns.push_back(sum.min_deadline_ns);
    in.round_start_ns = std::min(in.round_start_ns, sum.min_arrived_ns);
  }
  in.slowest_step_ns = slowest_live_step(st);
  // Adaptive inner steps: the learners' tau as their deltas say (the schedule's may have moved).
  in.tau = std::max(static_cast<uint32_t>(cfg(self).overlap_steps), sum.max_overlap);
  in.gamma = cfg(self).grace_gamma;
  in.cap_ns = to_ns(cfg(self).grace_cap_s);
  const int64_t grace = grace_window_ns(in);
  if (grace <= 0) {
    merge_now(self, of, false);
    return;
  }
  const int64_t until = in.now_ns + grace;
  if (of.armed && until >= of.armed_until_ns) return;  // the window armed ends first
  if (of.armed) {
    st.counters.grace_ns_total -= of.armed_until_ns - until;
  } else {
    st.counters.grace_windows += 1;
    st.counters.grace_ns_total += grace;
  }
  of.armed = true;
  of.armed_until_ns = until;
  set_timer(self, self->state.out, grace, grace_tick{of.id, of.round, self->state.incarnation});
}

// A copy of a send this shard already has: duplicated on the wire. Sends of a learner for a
// fragment come in increasing schedule steps over a FIFO link, and a final comes once.
bool is_duplicate(const owned_fragment& of, const outer_gradient_msg& msg) {
  if (msg.final) return of.finals.count(msg.learner) > 0;
  const auto it = of.last_send.find(msg.learner);
  return it != of.last_send.end() && msg.send_step <= it->second;
}

// A send counts as seen once it is accepted (or dropped as stale, with its reason); a rejected
// message does not use up its step.
void mark_seen(owned_fragment& of, const outer_gradient_msg& msg) {
  if (msg.final) return;  // finals are remembered in `finals`
  auto& last = of.last_send[msg.learner];
  last = std::max(last, msg.send_step);
}

// Merging costs debug.slow_shard_s per outer gradient. In real time the shard sleeps and
// messages wait in its mailbox; in simulated time outer gradients wait in a service queue, one
// served at a time, each done that long after the one before (or after it came, when idle).
void on_outer_gradient(self_ptr self, outer_gradient_msg& msg) {
  auto& st = self->state;
  const double slow = st.env->config.debug.slow_shard_s;
  DILOCO_CHECK(slow > 0 || st.in_service.empty(),
               "syncer: outer gradients wait in service only at a slow shard");
  if (!st.env->virtual_time) {
    // After the receipt, so that on a tape the read belongs to this input.
    const auto backlog = taped_read(self, tape_read::mailbox,
                                    [&] { return static_cast<int64_t>(self->mailbox().size()); });
    st.counters.mailbox_peak = std::max<uint64_t>(st.counters.mailbox_peak, backlog);
    if (slow > 0) std::this_thread::sleep_for(std::chrono::duration<double>(slow));
  } else if (slow > 0) {
    st.in_service.push_back(std::move(msg));
    const uint64_t waiting = st.in_service.size() - 1;  // behind the one in service
    st.counters.mailbox_peak = std::max(st.counters.mailbox_peak, waiting);
    if (waiting == 0) set_timer(self, st.out, to_ns(slow), service_tick{st.incarnation});
    return;
  }
  take_outer_gradient(self, msg);
}

// The outer gradient at the head of the service queue is done; the next one starts.
void on_service_tick(self_ptr self, service_tick tick) {
  auto& st = self->state;
  if (!st.alive() || tick.incarnation != st.incarnation) return;
  DILOCO_CHECK(!st.in_service.empty(), "syncer: a service tick with an outer gradient in service");
  outer_gradient_msg msg = std::move(st.in_service.front());
  st.in_service.pop_front();
  if (!st.in_service.empty()) {
    set_timer(self, st.out, to_ns(st.env->config.debug.slow_shard_s), service_tick{st.incarnation});
  }
  take_outer_gradient(self, msg);
}

namespace {

// An outer gradient this shard cannot take is rejected and counted: a fragment it does not
// own, an unknown learner, a base version from the future. A repeated send is dropped and
// counted. Otherwise: the fragment it is for.
owned_fragment* admit_outer_gradient(self_ptr self, const outer_gradient_msg& msg) {
  auto& st = self->state;
  owned_fragment* of = find_owned(self, msg.fragment);
  auto reject_delta = [&](const std::string& why) -> owned_fragment* {
    st.counters.deltas_rejected += 1;
    reject(self, why);
    return nullptr;
  };
  if (of == nullptr) {
    return reject_delta("outer gradient for fragment " + std::to_string(msg.fragment) +
                        " (not owned here)");
  }
  if (msg.learner >= st.env->ids.members() || (is_regional(st) && !in_region(st, msg.learner))) {
    return reject_delta("outer gradient from unknown learner " + std::to_string(msg.learner));
  }
  // A regional syncer's copy may be behind a learner that synced with the shard directly while
  // it was down: the shard, which made every version, judges the base.
  if (msg.base_version > of->version && !is_regional(st)) {
    return reject_delta("outer gradient of fragment " + std::to_string(of->id) +
                        " from the future (base " + std::to_string(msg.base_version) +
                        " > version " + std::to_string(of->version) + ")");
  }
  if (is_duplicate(*of, msg)) {
    st.counters.deltas_dropped_duplicate += 1;
    return nullptr;
  }
  return of;
}

// An outer gradient with work in it: its values checked (shape, checksum, finite), then
// dropped if too stale, or kept encoded in the fragment's pending sends of its learner (a
// second send before a merge adds to the first). False: rejected as invalid.
bool take_delta(self_ptr self, owned_fragment& of, outer_gradient_msg& msg) {
  auto& st = self->state;
  st.counters.deltas_received += 1;
  const bool cost = cfg(self).compute == compute_mode::cost;
  const size_t n = cost ? 0 : frag_of(self, of.id).size;  // cost model: no values
  // Checked now into scratch; kept encoded until merged.
  const fspan check(st.decoded.data(), n);
  if (auto s = cost ? status() : decode_checked(msg.delta, check); !s.ok()) {
    st.counters.deltas_invalid += 1;
    st.counters.deltas_rejected += 1;
    reject(self, "outer gradient of fragment " + std::to_string(of.id) + " from learner " +
                     std::to_string(msg.learner) + ": " + s.to_string());
    return false;
  }
  mark_seen(of, msg);
  const uint64_t staleness = of.version - msg.base_version;
  if (staleness > static_cast<uint64_t>(cfg(self).staleness_max)) {
    st.counters.deltas_dropped_stale += 1;
    spdlog::debug(
        "syncer {}: dropped stale delta of fragment {} from learner {} ({} versions behind)",
        st.index, of.id, msg.learner, staleness);
    return true;
  }
  if (staleness > 0) st.counters.deltas_late += 1;
  const int64_t delay = now_ns(self) - msg.st.sent_at_ns;
  st.latency_ns_ema = ema(st.latency_ns_ema, static_cast<double>(delay));
  auto [it, fresh] = of.pending.try_emplace(msg.learner);
  pending_delta& pd = it->second;
  const bool counted = pd.steps > 0;  // in the grace window's summary as a contributor
  if (cfg(self).period_auto.enabled) {
    // Its time on the wire, without the latency and the wait behind the learner's previous
    // delta on the link (pace.hpp); the reply answers the newest send, so it carries this.
    const auto j = st.join_delay_ns.find(msg.learner);
    const auto prev = st.last_arrival_ns.find(msg.learner);
    pd.uplink_ns = transfer_ns(now_ns(self), msg.st.sent_at_ns,
                               prev == st.last_arrival_ns.end() ? INT64_MIN / 2 : prev->second,
                               j == st.join_delay_ns.end() ? 0 : j->second);
    st.last_arrival_ns[msg.learner] = now_ns(self);
  }
  if (!cost) pd.blobs.push_back(msg.delta);
  if (fresh) {
    pd.base_version = msg.base_version;
    pd.deadline_ns = msg.deadline_ns;
    pd.arrived_ns = now_ns(self);
  } else {
    // The learner measured this delta from its previous send: the work adds up (at the
    // merge, decode_pending).
    pd.base_version = std::min(pd.base_version, msg.base_version);
    pd.deadline_ns = std::min(pd.deadline_ns, msg.deadline_ns);
    st.counters.deltas_combined += 1;
  }
  // The duplicate filter let through only a send after every one seen from this learner.
  DILOCO_CHECK(pd.send_steps.empty() || pd.send_steps.back() < msg.send_step,
               "syncer: a learner's pending sends of a fragment go at rising steps");
  pd.overlap_steps = std::max(pd.overlap_steps, msg.overlap_steps);
  pd.tokens += msg.tokens;
  pd.steps += msg.steps;
  pd.bytes += msg.delta.size();
  pd.send_step = std::max(pd.send_step, msg.send_step);
  pd.send_steps.push_back(msg.send_step);
  if (of.pending_sum.valid) fold_pending(of.pending_sum, pd, counted);
  return true;
}

}  // namespace

// Held while the shard recovers; otherwise admitted, taken, and then the fragment flushes (a
// learner's last send) or merges when it can.
void take_outer_gradient(self_ptr self, outer_gradient_msg& msg) {
  auto& st = self->state;
  DILOCO_CHECK(st.alive(), "syncer: only a live process takes an outer gradient");
  if (st.recovering()) {
    // Processed when the fragments are back.
    if (st.held_deltas.size() < recovery_buffer_max) {
      st.held_deltas.push_back(std::move(msg));
    } else {
      ++st.held_dropped;
    }
    return;
  }
  owned_fragment* of = admit_outer_gradient(self, msg);
  if (of == nullptr) return;
  if (is_regional(st)) adopt_learner(self, msg.learner);
  auto& known = of->learner_version[msg.learner];
  known = std::max(known, msg.base_version);
  if (msg.step_time_ns > 0) {
    int64_t& t = st.step_time_ns[msg.learner];
    if (st.slowest_valid && st.live.count(msg.learner) > 0) {
      if (msg.step_time_ns >= st.slowest_live_step_ns) {
        st.slowest_live_step_ns = msg.step_time_ns;
      } else if (t == st.slowest_live_step_ns) {
        st.slowest_valid = false;  // the slowest may have become faster
      }
    }
    t = msg.step_time_ns;
  }
  if (msg.steps > 0) {
    if (!take_delta(self, *of, msg)) return;
  } else {
    mark_seen(*of, msg);
  }
  auto& last = st.last_send_step[msg.learner];
  last = std::max(last, msg.send_step);
  if (msg.final) {
    st.out.faults_off = true;  // the run is stopping
    of->finals.insert(msg.learner);
    check_flush(self, *of);
  } else {
    maybe_merge(self, *of);
  }
}

// A learner's process ended: it no longer counts towards quorums and reductions.
void on_closed(self_ptr self, closed_msg& msg) {
  auto& st = self->state;
  if (st.env->ids.is_shard(msg.st.sender)) {
    on_upstream_closed(self, msg);  // a regional syncer's shard
    return;
  }
  // A member's process: a learner's, or a regional syncer's.
  const uint32_t learner = st.env->ids.is_regional(msg.st.sender)
                               ? st.env->ids.learners + (msg.st.sender - st.env->ids.regional(0))
                               : msg.st.sender;
  if (is_regional(st) && learner < st.env->ids.learners) st.departed.insert(learner);
  if (st.live.erase(learner) == 0) return;
  st.slowest_valid = false;
  if (is_regional(st) && st.live.empty()) leave_upstream(self);
  spdlog::debug("syncer {}: learner {} is down ({} live)", st.index, learner, st.live.size());
  for (auto& of : st.owned) {
    if (!of.finals.empty()) {
      check_flush(self, of);
    } else {
      maybe_merge(self, of);
    }
  }
}

// A process starts on the slot: the initial model (every replica starts from the same
// initialization, so version 0 needs no transfer), or, after a kill, an empty shard that
// rebuilds its fragments from the learners' copies.
void begin_process(self_ptr self, uint32_t incarnation, bool recovering) {
  auto& st = self->state;
  {
    shard_state fresh;
    fresh.env = std::move(st.env);
    fresh.index = st.index;
    fresh.dir = std::move(st.dir);
    fresh.out = std::move(st.out);
    fresh.counters = std::move(st.counters);  // the slot's counts, over all its processes
    fresh.up_send_step = st.up_send_step;     // rising over the slot's processes
    st = std::move(fresh);
  }
  st.incarnation = incarnation;
  st.out.reseed_links(*st.env, incarnation);
  st.phase = recovering ? shard_phase::recovering : shard_phase::serving;
  const actor_env& env = *st.env;
  DILOCO_CHECK(st.index < env.fragments_of.size(), "syncer: the shard's index is in the plan");
  const bool cost = env.config.compute == compute_mode::cost;
  float_buffer initial(cost ? 0 : env.model->layout().buffer_floats());
  if (initial.size() > 0) env.model->init(initial, env.config.seed);
  st.slot_of.assign(env.plan.fragments.size(), -1);
  size_t largest = 0;
  for (uint32_t p : env.fragments_of[st.index]) {
    DILOCO_CHECK(p < env.plan.fragments.size(), "syncer: a fragment it owns is in the plan");
    const fragment& f = env.plan.fragments[p];
    owned_fragment of;
    of.id = p;
    if (!cost) {
      of.global = float_buffer(f.size);
      f.gather(initial.data(), of.global.data());
    }
    // A regional syncer takes no outer step and encodes no update: it holds the global alone.
    if (!cost && !is_regional(st)) {
      of.momentum = float_buffer(f.size);
      of.round_delta = float_buffer(f.size);
      of.down_residual = float_buffer(f.size);
    }
    st.slot_of[p] = static_cast<int>(st.owned.size());
    st.owned.push_back(std::move(of));
    largest = std::max(largest, f.size);
  }
  st.decoded = float_buffer(largest);
  st.merged = float_buffer(largest);
  if (is_regional(st)) {
    regional_begin(self, recovering);  // it recovers from the shards, not from copies
    return;
  }
  if (recovering)
    set_timer(self, st.out, recovery_window_ns(env.config), recovery_tick{incarnation});
}

// The host failed: every learner sees the connection close; the slot waits for a restart.
void end_process(self_ptr self) {
  auto& st = self->state;
  DILOCO_CHECK(st.alive(), "syncer: only a live process ends");
  DILOCO_CHECK(st.recovering() || (st.held_deltas.empty() && st.held_pulls.empty()),
               "syncer: deltas and pulls are held only while the shard recovers");
  close_shard_links(self, *st.env, st.out, *st.dir, st.incarnation);
  st.phase = shard_phase::down;
  for (const auto& of : st.owned) {
    for (const auto& [learner, d] : of.pending)
      st.counters.deltas_lost_in_crash += d.send_steps.size();
  }
  st.counters.deltas_lost_in_crash += st.held_deltas.size() + st.in_service.size();
  st.owned.clear();
  st.slot_of.clear();  // no fragment here until a process starts (a snapshot checks the slots)
  st.live.clear();
  st.slowest_valid = false;
  st.held_deltas.clear();
  st.in_service.clear();
  st.held_pulls.clear();
}

// A learner joins (or rejoins after its restart): it counts from now on, and a rejoining one
// gets every fragment (held until the recovery is over, on a restarted shard).
void on_join(self_ptr self, join_msg& msg) {
  auto& st = self->state;
  if (!st.alive()) {
    // Connection refused: the learner learns that this shard is down.
    on_dropped(self, msg);
    if (!st.out.started) return;  // not down: not started yet (kept for the start)
    if (msg.learner < st.env->ids.members() && msg.st.sender == st.env->ids.member(msg.learner)) {
      post(self, direct(st.env->ids.member(msg.learner), st.dir->member(msg.learner)),
           closed_msg{st.out.make_stamp(now_ns(self)), st.incarnation});
    }
    return;
  }
  on_received(self, msg, message_overhead_bytes);
  if (msg.learner >= st.env->ids.members() || msg.st.sender != st.env->ids.member(msg.learner) ||
      (is_regional(st) && !in_region(st, msg.learner)))
    return reject(self, "join from unknown learner " + std::to_string(msg.learner));
  const learner_actor handle = st.dir->member(msg.learner);
  st.live[msg.learner] = handle;
  st.slowest_valid = false;
  st.departed.erase(msg.learner);
  if (is_regional(st) && !st.upstream_joined) join_upstream(self, false);
  st.join_delay_ns[msg.learner] = std::max<int64_t>(1, now_ns(self) - msg.st.sent_at_ns);
  DILOCO_CHECK(st.live.size() <= st.env->ids.members(),
               "syncer: live members are learners or regional syncers");
  if (st.recovering() && !is_regional(st)) {
    copy_request req{st.out.make_stamp(now_ns(self)), {}};
    for (const auto& of : st.owned) req.fragments.push_back(of.id);
    post(self, over_link(st.env->ids.member(msg.learner), handle), std::move(req));
  }
  if (msg.rejoin && !st.recovering()) {
    const uint64_t resume =
        st.last_send_step.count(msg.learner) ? st.last_send_step[msg.learner] : 0;
    for (auto& of : st.owned) send_full(self, of, handle, msg.learner, resume);
  } else if (msg.rejoin) {
    // A restarting learner needs the fragments, which exist again after the recovery.
    for (const auto& of : st.owned) st.held_pulls.push_back(pull_msg{stamp{}, msg.learner, of.id});
  }
}

// A learner asks for the whole of a fragment (it lost its copy or fell too far behind).
void on_pull(self_ptr self, pull_msg& msg) {
  auto& st = self->state;
  if (st.recovering()) {
    if (st.held_pulls.size() < recovery_buffer_max) st.held_pulls.push_back(msg);
    return;
  }
  owned_fragment* of = find_owned(self, msg.fragment);
  if (is_regional(st) && in_region(st, msg.learner)) adopt_learner(self, msg.learner);
  auto it = st.live.find(msg.learner);
  if (of == nullptr || it == st.live.end())
    return reject(self, "pull of fragment " + std::to_string(msg.fragment));
  // A regional syncer's copy can be behind a learner that synced with the shard directly while
  // it was down; the shard's next answer brings it up, and the learner's next send an answer.
  if (is_regional(st)) {
    const auto known = of->learner_version.find(msg.learner);
    if (known != of->learner_version.end() && known->second > of->version) return;
  }
  send_full(self, *of, it->second, msg.learner, 0);
}

// The counts of the slot and the state of its fragments, for the run's report.
shard_report make_report(const shard_state& st) {
  shard_report r = st.counters;
  r.bytes_sent = st.out.bytes_sent;
  r.bytes_received = st.out.bytes_received;
  r.versions.clear();
  r.incarnation = st.incarnation;
  r.recovered_versions.clear();
  for (const auto& of : st.owned) {
    if (of.recovered) r.recovered_versions.push_back(of.recovered_version);
    r.versions.push_back(of.version);
    r.global_hashes.push_back(checksum64(of.global.data(), of.global.size() * sizeof(float)));
    r.pending_at_end += of.pending.size();
  }
  r.trace = st.out.trace;
  return r;
}

// The global value of every fragment the shard owns (the evaluation reads it).
global_snapshot global_of(const shard_state& st) {
  global_snapshot snap;
  if (is_regional(st)) return snap;  // a copy of the shards' values, which they report
  std::vector<uint8_t> bytes;
  for (const auto& of : st.owned) {
    encode_global(of.global, bytes);
    snap.fragments.push_back(of.id);
    snap.versions.push_back(of.version);
    snap.values.emplace_back(bytes);
  }
  return snap;
}

}  // namespace shard

int64_t recovery_window_ns(const run_config& config) {
  return answer_wait_ns(config);
}

shard_actor::behavior_type syncer(shard_actor::stateful_pointer<shard_state> self,
                                  std::shared_ptr<const actor_env> env, uint32_t index,
                                  directory_ptr dir) {
  using namespace shard;
  init_shard_slot(self->state, env, index, std::move(dir));
  auto dead = [self] { return !self->state.alive(); };
  return {
      // The messages of every round first: CAF tries the handlers in order.
      when_live(self, dead, [=](outer_gradient_msg& msg) { on_outer_gradient(self, msg); }),
      [=](grace_tick tick) -> one_way {
        timer_fired(self, tick);
        if (dead() || tick.incarnation != self->state.incarnation) return {};
        owned_fragment* of = find_owned(self, tick.fragment);
        if (of != nullptr && of->armed && of->round == tick.round) merge_now(self, *of, false);
        return {};
      },
      [=](rewire_msg& m) { on_rewire(self->state, m); },
      [=](start_msg& msg) {
        if (msg.incarnation > 0) {
          // A deployed node's restarted process (hosts/deploy.cpp), with its part of the
          // newest snapshot when there is one.
          started_now(self, msg);
          begin_process(self, msg.incarnation, true);
          if (is_regional(self->state)) return;  // it recovers from the shards, and says so
          if (!msg.restore.empty()) seed_from_snapshot(self, msg.restore);
          announce_restart(self);
          return;
        }
        if (start_or_restore(self, msg)) return;
        begin_process(self, 0, false);
      },
      [=](marker_msg& m) { on_marker(self, m); },
      [=](join_msg& msg) { on_join(self, msg); },
      when_live(self, dead, [=](pull_msg& msg) { on_pull(self, msg); }),
      when_live(self, dead,
                [=](gradient_msg&) {
                  reject(self, "a gradient (the data-parallel baseline's shard slots reduce them)");
                }),
      when_live(self, dead, [=](copy_msg& msg) { on_copy(self, msg); }),
      [=](recovery_tick tick) {
        timer_fired(self, tick);
        if (dead() || tick.incarnation != self->state.incarnation) return;
        if (is_regional(self->state)) {
          regional_recovery_tick(self);
          return;
        }
        finish_recovery(self);
      },
      [=](service_tick tick) {
        timer_fired(self, tick);
        on_service_tick(self, tick);
      },
      when_live(self, dead, [=](kill_msg&) { end_process(self); }),
      when_dormant(self, dead,
                   [=](restart_msg& msg) { begin_process(self, msg.incarnation, true); }),
      when_live(self, dead, [=](closed_msg& msg) { on_closed(self, msg); }),
      // A regional syncer's messages from its shards (a shard refuses them).
      when_live(self, dead, [=](fragment_update_msg& msg) { on_upstream_update(self, msg); }),
      when_live(self, dead, [=](copy_request& msg) { on_upstream_copy_request(self, msg); }),
      when_live(self, dead, [=](peer_msg& msg) { on_upstream_peer(self, msg); }),
      when_live(self, dead, [=](schedule_msg& msg) { on_regional_schedule(self, msg); }),
      [=](report_request) { return make_report(self->state); },
      [=](global_request) { return global_of(self->state); },
  };
}

}  // namespace diloco
