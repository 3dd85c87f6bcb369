// The regional syncer (docs/architecture.md, "Regional syncers"): a shard slot past the run's
// shards, running the syncer role with two faces. To its region's learners it is a syncer of
// every fragment: they join it, send it their outer gradients, and it keeps them pending until
// its quorum and grace window say merge (the code of a shard). Its merge is not an outer step:
// it merges its learners' deltas by the run's rule and sends the result to the fragment's shard
// as one member whose token weight is theirs together, so the wide-area link carries one delta
// per round instead of one per learner. The shard's answer brings the updates that make the
// new versions; the regional syncer adds them to its copy (the same blobs, so every copy stays
// bit-identical to the shard's) and answers each learner whose send the merge took, from the
// version that learner had.
//
// When it dies its learners sync with the shards directly (actors/learner.cpp, route_of); a
// restarted one rejoins the shards, which answer with every fragment whole, and once it holds
// them all it tells its learners, which come back.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "actors/shard_parts.hpp"
#include "base/check.hpp"
#include "tensor/codec.hpp"
#include "tensor/merge.hpp"

namespace diloco::shard {

namespace {

uint32_t region_index(const shard_state& st) {
  DILOCO_CHECK(is_regional(st), "regional: a regional syncer's slot");
  return st.index - st.env->ids.shards;
}
// Its number among the shards' members (actor_indices::member).
uint32_t own_member(const shard_state& st) {
  return st.env->ids.learners + region_index(st);
}
uint32_t shard_of(const shard_state& st, uint32_t p) {
  DILOCO_CHECK(p < st.env->shard_of.size(), "regional: a fragment of the plan");
  return st.env->shard_of[p];
}

template <class Msg>
void post_upstream(self_ptr self, uint32_t s, Msg&& msg, uint64_t bytes = message_overhead_bytes) {
  auto& st = self->state;
  DILOCO_CHECK(s < st.dir->shards.size(), "regional: a shard of the run");
  post(self, over_link(st.env->ids.shard(s), st.dir->shards[s], bytes), std::forward<Msg>(msg));
}

// The sends to shard s awaiting an answer will not have one (its process ended, or this one
// left): their learners fetch the fragment when the reply is overdue, as from a shard that died.
void forget_in_flight(shard_state& st, uint32_t s) {
  for (auto& of : st.owned) {
    if (shard_of(st, of.id) == s) of.in_flight.clear();
  }
}

// Every fragment is whole again: serve, tell the region's learners, and take what was held.
void finish_regional_recovery(self_ptr self) {
  auto& st = self->state;
  st.phase = shard_phase::serving;
  spdlog::info("regional syncer {}: process {} recovered every fragment from the shards",
               region_index(st), st.incarnation);
  for (uint32_t l = 0; l < st.dir->learners.size(); ++l) {
    if (!in_region(st, l)) continue;
    post(self, direct(st.env->ids.learner(l), st.dir->learners[l]),
         peer_msg{st.out.make_stamp(now_ns(self)), st.index, st.incarnation});
  }
  // Until its learners come back it is no member the shards should wait for.
  if (st.live.empty()) leave_upstream(self);
  serve_held(self);
}

// The shard's whole fragment: the copy becomes it, with no update kept to answer from.
bool take_full(self_ptr self, owned_fragment& of, const fragment_update_msg& msg) {
  auto& st = self->state;
  if (msg.blobs.size() != 1) return false;
  const bool cost = cfg(self).compute == compute_mode::cost;  // versions only, no values
  if (auto s = cost ? status() : decode_checked(msg.blobs[0], of.global.all()); !s.ok()) {
    reject(self, "whole fragment " + std::to_string(of.id) + " from its shard: " + s.to_string());
    return false;
  }
  of.version = msg.to_version;
  of.history.clear();
  st.up_send_step = std::max(st.up_send_step, msg.reply_to_step);
  return true;
}

// Adaptive inner steps: an answer to its newest merged send of the fragment is one measured
// round of the wide-area link, and the scheduler hears what the newest rounds show, as from a
// learner (actors/learner.cpp, measure_round): the region's learners measure only their own
// network to it. One schedule step is the shared clock's, or its slowest live learner's.
// `held`: the send's deltas waited for the answer to the one before.
void measure_upstream_round(self_ptr self, const fragment_update_msg& msg, int64_t previous_ns,
                            uint64_t sent_bytes, bool held, uint64_t version_before) {
  auto& st = self->state;
  if (msg.full || msg.uplink_ns <= 0) return;
  const double scale = st.env->payload_scale;
  link_sample sample = round_sample(
      msg, shard_of(st, msg.fragment), now_ns(self), previous_ns,
      static_cast<uint64_t>(static_cast<double>(sent_bytes) * scale),
      static_cast<uint64_t>(static_cast<double>(wire_bytes(msg)) * scale), version_before);
  sample.held = held;
  const link_estimate e =
      keep_round(st.pace_samples, sample, st.env->shard_of, st.dir->shards.size());
  if (!e.ok) return;
  const int64_t step_ns = cfg(self).clock == schedule_clock::global
                              ? std::max<int64_t>(1, to_ns(cfg(self).speed.step_time_s))
                              : slowest_live_step(st);
  if (step_ns <= 0) return;
  pace_msg m;
  m.st = st.out.make_stamp(now_ns(self));
  m.learner = own_member(st);
  m.change = st.schedule_change;
  m.step_ns = step_ns;
  fill_pace(m, e);
  // Deltas that waited for the answer to the send before theirs (at most one per fragment is on
  // the link) took up to two rounds to be answered: while rounds like that are among the
  // newest, tau must hide both.
  if (std::any_of(st.pace_samples.begin(), st.pace_samples.end(),
                  [](const link_sample& s) { return s.held; }))
    m.round_ns = 2 * e.round_ns;
  post(self, direct(st.env->ids.scheduler(), st.dir->scheduler), std::move(m));
}

// Answers a learner from its version `from`, unless its copy is newer than this one: after the
// regional syncer was down, a learner that synced with the shard directly can be ahead until
// the shard's next answer (an older version would take its copy back).
void answer_learner(self_ptr self, owned_fragment& of, uint32_t learner, uint64_t from,
                    uint64_t reply_to_step) {
  const auto known = of.learner_version.find(learner);
  if (from > of.version || (known != of.learner_version.end() && known->second > of.version))
    return;
  send_reply(self, of, learner, from, reply_to_step);
}

}  // namespace

bool in_region(const shard_state& st, uint32_t learner) {
  return learner < st.env->regional_of.size() &&
         st.env->regional_of[learner] == static_cast<int>(region_index(st));
}

// The run's quorum K of M learners, scaled to the region's learners (at least one).
size_t regional_quorum(const shard_state& st) {
  const run_config& c = st.env->config;
  const uint32_t in = st.env->regional_learners[region_index(st)];
  const double share = static_cast<double>(c.effective_quorum()) * static_cast<double>(in) /
                       static_cast<double>(std::max(1, c.learners));
  return std::max<size_t>(1, static_cast<size_t>(std::ceil(share - 1e-9)));
}

bool upstream_down_for(const shard_state& st, uint32_t fragment) {
  const uint32_t s = shard_of(st, fragment);
  return !st.upstream_joined || (s < st.upstream_down.size() && st.upstream_down[s]);
}

bool awaiting_answer(self_ptr self, const owned_fragment& of) {
  if (of.in_flight.empty()) return false;
  const int64_t overdue =
      std::max(answer_wait_ns(cfg(self)), static_cast<int64_t>(4.0 * self->state.up_round_ns_ema));
  return now_ns(self) - of.in_flight.back().sent_ns < overdue;
}

void regional_begin(self_ptr self, bool recovering) {
  auto& st = self->state;
  const size_t shards = st.dir->shards.size();
  st.upstream_down.assign(shards, false);
  st.upstream_incarnation.assign(shards, 0);
  if (cfg(self).uplink.error_feedback && cfg(self).compute != compute_mode::cost) {
    for (auto& of : st.owned) of.up_residual = float_buffer(frag_of(self, of.id).size);
  }
  // A restarted process asks the shards for every fragment whole (a rejoin), and asks again
  // for what has not come (a whole fragment lost on a lossy link) until it has them all.
  join_upstream(self, recovering);
  // Adaptive inner steps: it measures its wide-area link under the schedule in force, which
  // the scheduler says in answer (and again at every change).
  if (cfg(self).period_auto.enabled) {
    post(self, direct(st.env->ids.scheduler(), st.dir->scheduler),
         join_msg{st.out.make_stamp(now_ns(self)), own_member(st), recovering});
  }
  if (recovering)
    set_timer(self, st.out, recovery_window_ns(cfg(self)), recovery_tick{st.incarnation});
}

void on_regional_schedule(self_ptr self, const schedule_msg& msg) {
  auto& st = self->state;
  if (!is_regional(st) || msg.st.sender != st.env->ids.scheduler() ||
      !cfg(self).period_auto.enabled)
    return reject(self, "a schedule (a regional syncer under period_steps: auto takes them)");
  st.schedule_change = std::max(st.schedule_change, msg.change);
}

void regional_recovery_tick(self_ptr self) {
  auto& st = self->state;
  if (!st.recovering()) return;
  for (const auto& of : st.owned) {
    const uint32_t s = shard_of(st, of.id);
    if (of.mirrored || st.upstream_down[s]) continue;
    post_upstream(self, s, pull_msg{st.out.make_stamp(now_ns(self)), own_member(st), of.id});
  }
  set_timer(self, st.out, recovery_window_ns(cfg(self)), recovery_tick{st.incarnation});
}

void join_upstream(self_ptr self, bool rejoin) {
  auto& st = self->state;
  st.upstream_joined = true;
  for (uint32_t s = 0; s < st.dir->shards.size(); ++s) {
    post_upstream(self, s, join_msg{st.out.make_stamp(now_ns(self)), own_member(st), rejoin});
  }
}

void adopt_learner(self_ptr self, uint32_t learner) {
  auto& st = self->state;
  if (st.live.count(learner) > 0 || !in_region(st, learner) || st.departed.count(learner) > 0)
    return;
  st.live[learner] = st.dir->learners[learner];
  st.slowest_valid = false;
  if (!st.upstream_joined) join_upstream(self, false);
}

void leave_upstream(self_ptr self) {
  auto& st = self->state;
  if (!st.upstream_joined) return;
  st.upstream_joined = false;
  for (uint32_t s = 0; s < st.dir->shards.size(); ++s) {
    post_upstream(self, s, closed_msg{st.out.make_stamp(now_ns(self)), st.incarnation});
    forget_in_flight(st, s);
  }
}

// The learners' pending deltas merged by the run's rule into one, sent to the fragment's shard
// with their tokens and a step count that keeps their token weight (sum of tokens^2 / steps).
void regional_merge(self_ptr self, owned_fragment& of, bool final) {
  auto& st = self->state;
  const fragment& f = frag_of(self, of.id);
  const size_t n = f.size;
  // The cost model moves versions and bytes, not values.
  const bool cost = cfg(self).compute == compute_mode::cost;
  std::vector<merge_input> inputs;
  upstream_send sent;
  uint64_t tokens = 0, base = of.version;
  double weight = 0.0;
  int64_t deadline = INT64_MAX;
  uint32_t overlap = 0;
  pooled_deltas decoded{st, {}};
  decoded.values.reserve(of.pending.size());
  for (const auto& [learner, pd] : of.pending) {
    const double w = token_weight(pd.tokens, pd.steps);
    if (w <= 0.0) continue;
    if (cost) {
      inputs.push_back({cfspan(), w});
    } else {
      decoded.values.push_back(decode_pending(st, pd, n));
      inputs.push_back({cfspan(decoded.values.back().data(), n), w});
    }
    log_merged_sends(st, of, learner, pd);
    sent.learners.push_back(learner);
    sent.bases.push_back(pd.base_version);
    sent.steps.push_back(pd.send_step);
    tokens += pd.tokens;
    weight += w;
    base = std::min(base, pd.base_version);
    deadline = std::min(deadline, pd.deadline_ns);
    overlap = std::max(overlap, pd.overlap_steps);
  }
  if (of.armed && of.armed_until_ns > now_ns(self))
    st.counters.grace_ns_total -= of.armed_until_ns - now_ns(self);
  of.armed = false;
  of.armed_until_ns = 0;
  ++of.round;
  release_pending(st, of);
  outer_gradient_msg msg;
  msg.fragment = of.id;
  msg.learner = own_member(st);
  msg.final = final;
  if (!inputs.empty() && !cost) {
    fspan merged(st.merged.data(), n);
    if (auto s = merge_fragment(f, cfg(self).merge,
                                span<const merge_input>(inputs.data(), inputs.size()), merged,
                                nullptr, st.env->merge_pool.get());
        !s.ok()) {
      ++st.counters.merges_refused;
      spdlog::error("regional syncer {}: merge of fragment {} refused: {}", region_index(st), of.id,
                    s.to_string());
      if (!final) return;
      inputs.clear();  // the shard still hears that these learners are done
    }
  }
  if (inputs.empty() && !final) return;  // no work in it
  uint64_t bytes = message_overhead_bytes;
  if (!inputs.empty() && cost) {
    bytes += encoded_bytes(cfg(self).uplink, n);  // what the encoded delta would weigh
  } else if (!inputs.empty()) {
    const codec_config& uplink = cfg(self).uplink;
    status encoded;
    if (uplink.error_feedback) {
      float* e = of.up_residual.data();
      const float* m = st.merged.data();
      for (size_t i = 0; i < n; ++i) e[i] += m[i];
      encoded = encode_accumulated(uplink, of.up_residual.all(), st.blob);
    } else {
      encoded = encode(uplink, cfspan(st.merged.data(), n), fspan(), st.blob);
    }
    DILOCO_CHECK(encoded.ok(), "regional: a merge of finite deltas encodes");
    msg.delta = tensor_blob(st.blob);
    bytes += msg.delta.size();
  }
  if (!inputs.empty()) {
    msg.tokens = tokens;
    // token_weight(tokens, steps) = tokens^2 / steps: the steps that give the merged delta its
    // learners' weight together.
    msg.steps = std::max<uint64_t>(
        1, static_cast<uint64_t>(
               std::llround(static_cast<double>(tokens) * static_cast<double>(tokens) / weight)));
    st.counters.merges += 1;
    st.counters.deltas_merged += inputs.size();
    if (!final) st.counters.quorum_merges += 1;
  }
  msg.base_version = base;
  msg.deadline_ns = deadline == INT64_MAX ? 0 : deadline;
  msg.overlap_steps = overlap;  // adaptive inner steps: the tau its learners follow (else 0)
  for (const auto& [learner, handle] : st.live) {
    if (auto t = st.step_time_ns.find(learner); t != st.step_time_ns.end())
      msg.step_time_ns = std::max(msg.step_time_ns, t->second);
  }
  msg.send_step = ++st.up_send_step;
  msg.st = st.out.make_stamp(now_ns(self));
  sent.held = of.held;
  of.held = false;
  if (!final && !sent.learners.empty()) {
    sent.send_step = msg.send_step;
    sent.sent_ns = now_ns(self);
    sent.bytes = bytes;
    of.in_flight.push_back(std::move(sent));
    // Answers lost on the way are not waited for: their learners resync by themselves.
    while (of.in_flight.size() > static_cast<size_t>(cfg(self).staleness_max))
      of.in_flight.pop_front();
  }
  post_upstream(self, shard_of(st, of.id), std::move(msg), bytes);
}

void on_upstream_update(self_ptr self, fragment_update_msg& msg) {
  auto& st = self->state;
  if (!is_regional(st)) return reject(self, "a fragment update (a shard sends them)");
  owned_fragment* of = find_owned(self, msg.fragment);
  if (of == nullptr || msg.st.sender != st.env->ids.shard(shard_of(st, msg.fragment)) ||
      msg.to_version < msg.from_version ||
      (!msg.full && msg.blobs.size() != msg.to_version - msg.from_version))
    return reject(self, "a malformed fragment update for fragment " + std::to_string(msg.fragment));
  const uint32_t s = shard_of(st, of->id);
  // Adaptive inner steps: when the answer before this one on the same link arrived.
  int64_t previous_ns = INT64_MIN / 2;
  if (cfg(self).period_auto.enabled) {
    if (st.up_last_reply_ns.size() < st.dir->shards.size())
      st.up_last_reply_ns.resize(st.dir->shards.size(), INT64_MIN / 2);
    previous_ns = st.up_last_reply_ns[s];
    st.up_last_reply_ns[s] = now_ns(self);
  }
  if (st.recovering()) {
    // Only the whole fragment the rejoin asked for counts; a reply to the dead process's sends
    // goes before it on the link.
    if (!msg.full || of->mirrored || !take_full(self, *of, msg)) return;
    of->mirrored = true;
    const bool all = std::all_of(st.owned.begin(), st.owned.end(),
                                 [](const owned_fragment& o) { return o.mirrored; });
    if (all) finish_regional_recovery(self);
    return;
  }
  const uint64_t version_before = of->version;
  if (msg.full) {
    if (!take_full(self, *of, msg)) return;
  } else if (msg.from_version > of->version) {
    // Versions missing in between (a lost reply): the whole fragment instead.
    post_upstream(self, s, pull_msg{st.out.make_stamp(now_ns(self)), own_member(st), of->id});
    return;
  } else {
    const auto kept = static_cast<size_t>(cfg(self).staleness_max);
    const bool cost = cfg(self).compute == compute_mode::cost;  // versions only, no values
    for (uint64_t v = of->version; v < msg.to_version; ++v) {
      const tensor_blob& blob = msg.blobs[v - msg.from_version];
      if (auto ok = cost ? status() : decode_add(blob.view(), of->global.all()); !ok.ok()) {
        reject(self, "update of fragment " + std::to_string(of->id) + " version " +
                         std::to_string(v) + " from its shard: " + ok.to_string());
        post_upstream(self, s, pull_msg{st.out.make_stamp(now_ns(self)), own_member(st), of->id});
        return;
      }
      of->history.push_back(blob);
      while (of->history.size() > kept) of->history.pop_front();
      of->version = v + 1;
    }
  }
  // The sends the shard answered (it answers in order): each of their learners gets the
  // updates from the version it had.
  while (msg.reply_to_step > 0 && !of->in_flight.empty() &&
         of->in_flight.front().send_step <= msg.reply_to_step) {
    const upstream_send sent = std::move(of->in_flight.front());
    of->in_flight.pop_front();
    if (sent.send_step == msg.reply_to_step) {
      st.up_round_ns_ema =
          ema(st.up_round_ns_ema, static_cast<double>(now_ns(self) - sent.sent_ns));
      if (cfg(self).period_auto.enabled)
        measure_upstream_round(self, msg, previous_ns, sent.bytes, sent.held, version_before);
    }
    for (size_t i = 0; i < sent.learners.size(); ++i)
      answer_learner(self, *of, sent.learners[i], sent.bases[i], sent.steps[i]);
  }
  // What gathered while the answer was on its way goes up now (if its quorum is in).
  if (!of->flushed) maybe_merge(self, *of);
  // After the final merge: every learner gets the final version, as from a shard.
  if (of->flushed) {
    for (const auto& [learner, handle] : st.live) {
      const auto known = of->learner_version.find(learner);
      answer_learner(self, *of, learner, known == of->learner_version.end() ? 0 : known->second, 0);
    }
  }
}

void on_upstream_copy_request(self_ptr self, copy_request& msg) {
  auto& st = self->state;
  if (!is_regional(st) || !st.env->ids.is_shard(msg.st.sender))
    return reject(self, "a copy request (a restarted shard asks its members)");
  const uint32_t s = msg.st.sender - st.env->ids.shard(0);
  std::vector<uint8_t> bytes;
  for (uint32_t p : msg.fragments) {
    owned_fragment* of = find_owned(self, p);
    if (of == nullptr || shard_of(st, p) != s) {
      reject(self, "a copy request for fragment " + std::to_string(p) + " of another shard");
      continue;
    }
    if (st.recovering() && !of->mirrored) continue;  // nothing of the shard's yet
    const status e = encode(codec_config::make(codec_kind::fp32),
                            cfspan(of->global.data(), of->global.size()), fspan(), bytes);
    DILOCO_CHECK(e.ok(), "regional: its copy of a fragment holds a non-finite value");
    copy_msg reply{st.out.make_stamp(now_ns(self)), p, own_member(st), of->version,
                   tensor_blob(bytes)};
    post_upstream(self, s, std::move(reply), bytes.size() + message_overhead_bytes);
  }
}

// A shard's new process: the regional syncer joins it again (asking for its fragments whole
// while it has not recovered them itself) and merges what waited for it.
void on_upstream_peer(self_ptr self, peer_msg& msg) {
  auto& st = self->state;
  if (!is_regional(st) || msg.shard >= st.upstream_down.size())
    return reject(self, "a shard's restart for shard " + std::to_string(msg.shard));
  const uint32_t s = msg.shard;
  if (msg.incarnation <= st.upstream_incarnation[s]) return;
  st.upstream_incarnation[s] = msg.incarnation;
  st.upstream_down[s] = false;
  forget_in_flight(st, s);
  if (!st.upstream_joined && !st.recovering()) return;  // no learner of its own to sync for
  post_upstream(self, s,
                join_msg{st.out.make_stamp(now_ns(self)), own_member(st), st.recovering()});
  if (st.recovering()) return;
  for (auto& of : st.owned) {
    if (shard_of(st, of.id) == s) maybe_merge(self, of);
  }
}

void on_upstream_closed(self_ptr self, closed_msg& msg) {
  auto& st = self->state;
  const uint32_t s = msg.st.sender - st.env->ids.shard(0);
  if (!is_regional(st) || s >= st.upstream_down.size() ||
      msg.incarnation < st.upstream_incarnation[s])
    return;
  st.upstream_incarnation[s] = msg.incarnation;
  st.upstream_down[s] = true;
  forget_in_flight(st, s);
}

}  // namespace diloco::shard
