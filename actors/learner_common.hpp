// What the three learner roles (learner, data-parallel learner, cost-model learner) share:
// the speed model, the life of a process on its slot, and announcing it to the cluster.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>
#include <utility>

#include "actors/learner.hpp"
#include "actors/slot.hpp"
#include "base/check.hpp"
#include "runtime/directory.hpp"
#include "runtime/env.hpp"
#include "runtime/snapshot.hpp"
#include "runtime/transport.hpp"
#include "tensor/rng.hpp"

namespace diloco {

// One step-time multiplier: slowdown x a mean-one lognormal of the learner's jitter.
inline double draw_speed_factor(const speed_config& sp, rng& gen) {
  double factor = sp.slowdown;
  if (sp.jitter > 0) factor *= std::exp(sp.jitter * gen.normal() - 0.5 * sp.jitter * sp.jitter);
  return factor;
}

// Regional syncers, for every learner kind whose state has id, env, dir and shard_down (a view
// per shard, and one more, the last, of the learner's regional syncer when it has one).

// The learner's regional syncer (-1: none).
template <class State>
int regional_of(const State& st) {
  return st.id < st.env->regional_of.size() ? st.env->regional_of[st.id] : -1;
}

// Whether the learner syncs through its regional syncer now (it has one, and it is up).
template <class State>
bool via_regional(const State& st) {
  const size_t regional_slot = st.dir->shards.size();
  return regional_of(st) >= 0 && st.shard_down.size() > regional_slot &&
         !st.shard_down[regional_slot];
}

// Where fragment p syncs: the learner's regional syncer (view slot `shards`) while it is up,
// otherwise the fragment's shard.
template <class State>
uint32_t route_of(const State& st, uint32_t p) {
  DILOCO_CHECK(p < st.env->shard_of.size() && st.env->shard_of[p] < st.dir->shards.size(),
               "learner: a fragment belongs to a shard of the run");
  return via_regional(st) ? static_cast<uint32_t>(st.dir->shards.size()) : st.env->shard_of[p];
}

// A message to view slot `slot` (a shard, or the learner's regional syncer).
template <class Self, class Msg>
void post_to(Self* self, uint32_t slot, Msg&& msg, uint64_t bytes = message_overhead_bytes) {
  auto& st = self->state;
  if (slot < st.dir->shards.size()) {
    post(self, over_link(st.env->ids.shard(slot), st.dir->shards[slot], bytes),
         std::forward<Msg>(msg));
    return;
  }
  DILOCO_CHECK(regional_of(st) >= 0, "learner: a message to a regional syncer it has");
  const auto r = static_cast<uint32_t>(regional_of(st));
  post(self, over_link(st.env->ids.regional(r), st.dir->regionals[r], bytes),
       std::forward<Msg>(msg));
}

// The view slot of a shard slot's actor index: a shard, or the learner's own regional syncer
// (the view's last slot); -1 for anything else.
template <class State>
int64_t view_slot(const State& st, uint32_t sender) {
  const auto& ids = st.env->ids;
  if (ids.is_shard(sender)) return sender - ids.shard(0);
  const int r = regional_of(st);
  if (r >= 0 && sender == ids.regional(static_cast<uint32_t>(r)))
    return static_cast<int64_t>(st.dir->shards.size());
  return -1;
}

// The views of a fresh process: every shard up, and its regional syncer when it has one.
template <class State>
void reset_views(State& st) {
  const size_t views = st.dir->shards.size() + (regional_of(st) >= 0 ? 1 : 0);
  st.shard_down.assign(views, false);
  st.shard_incarnation.assign(views, 0);
}

// The view slot a peer_msg names: a shard, or (shards + its number) the learner's own regional
// syncer; -1 when it names neither.
template <class State>
int64_t peer_slot(const State& st, const peer_msg& msg) {
  const auto shards = static_cast<uint32_t>(st.dir->shards.size());
  if (msg.shard < shards) return msg.shard;
  const int r = regional_of(st);
  if (r >= 0 && msg.shard == shards + static_cast<uint32_t>(r)) return shards;
  return -1;
}

// A learner (re)joins: the metrics actor (for the stop), the fragment scheduler (for its
// schedule; not for data parallel) and every shard.
template <class Self>
void announce_join(Self* self, const actor_env& env, outbox& out, const cluster_directory& dir,
                   uint32_t id, bool rejoin, bool with_scheduler) {
  DILOCO_CHECK(id < env.ids.learners, "a join from outside the learner slots");
  DILOCO_CHECK(dir.shards.size() == env.ids.shards, "a join with a directory missing shards");
  join_msg join{out.make_stamp(now_ns(self)), id, rejoin};
  post(self, env, out, direct(env.ids.metrics(), dir.metrics), join);
  if (with_scheduler) {
    join.st = out.make_stamp(now_ns(self));
    post(self, env, out, direct(env.ids.scheduler(), dir.scheduler), join);
  }
  // A learner of a region with a regional syncer syncs with it alone while it is up.
  if (const int r = id < env.regional_of.size() ? env.regional_of[id] : -1; r >= 0) {
    join.st = out.make_stamp(now_ns(self));
    const auto ri = static_cast<uint32_t>(r);
    post(self, env, out, over_link(env.ids.regional(ri), dir.regionals[ri]), join);
    return;
  }
  for (uint32_t s = 0; s < dir.shards.size(); ++s) {
    join.st = out.make_stamp(now_ns(self));
    post(self, env, out, over_link(env.ids.shard(s), dir.shards[s]), join);
  }
}

// Sends the metrics actor what the learner's meter counted since its last report, with the
// bytes its links moved, and starts the meter over. The cost model counts steps, not tokens:
// given tokens_per_step, the report's tokens are its whole steps times that.
// period_steps, overlap_steps: the H and tau the learner follows (adaptive inner steps; 0
// otherwise).
template <class Self>
void send_progress(Self* self, uint64_t tokens_per_step = 0, uint32_t period_steps = 0,
                   uint32_t overlap_steps = 0) {
  auto& st = self->state;
  progress_msg msg;
  msg.st = st.out.make_stamp(now_ns(self));
  msg.learner = st.id;
  msg.period_steps = period_steps;
  msg.overlap_steps = overlap_steps;
  st.meter.take(msg);
  if (tokens_per_step > 0) msg.tokens = msg.steps * tokens_per_step;
  std::tie(msg.bytes_sent, msg.bytes_received) = st.out.take_byte_counts();
  post(self, direct(st.env->ids.metrics(), st.dir->metrics), std::move(msg));
}

// A learner or cost learner slot starts with its fields set; the check its handlers guard with
// is returned: no process runs on the slot (what reaches it then is lost, as on a dead host).
template <class State>
auto open_learner_slot(learner_actor::stateful_pointer<State> self,
                       std::shared_ptr<const actor_env> env, uint32_t id, directory_ptr dir) {
  init_learner_slot(self->state, std::move(env), id, std::move(dir));
  return [self] {
    const auto now = self->state.now;
    return now == State::phase::absent || now == State::phase::down;
  };
}

// A learner kind's behavior: its own handlers, in the order CAF is to try them (a step's and a
// round's messages first), then what every learner slot answers alike: rewiring, the start and
// snapshot markers. At a start without a snapshot part, slots of the starting membership begin a
// process (`begin(incarnation)`); spare slots wait for a join.
template <class State, class Begin, class... Handlers>
learner_actor::behavior_type learner_slot_behavior(learner_actor::stateful_pointer<State> self,
                                                   Begin begin, Handlers... handlers) {
  return {std::move(handlers)..., [=](rewire_msg& m) { on_rewire(self->state, m); },
          [=](start_msg& msg) {
            if (start_or_restore(self, msg)) return;
            const auto& st = self->state;
            if (st.id < static_cast<uint32_t>(st.env->config.learners)) begin(msg.incarnation);
          },
          [=](marker_msg& m) { on_marker(self, m); }};
}

// What a slot without a process reports: its identity only.
inline learner_report absent_report(uint32_t id) {
  learner_report r;
  r.learner = id;
  return r;
}

// The part of a learner's report that every kind fills alike: its identity, its links' counts
// and trace, its busy time and what it rejected.
template <class State>
learner_report slot_report(const State& st) {
  learner_report r;
  r.learner = st.id;
  r.incarnation = st.incarnation;
  r.bytes_sent = st.out.bytes_sent;
  r.bytes_received = st.out.bytes_received;
  r.messages_sent = st.out.messages_sent;
  r.busy_ns = st.busy_ns;
  r.rejected_messages = st.rejected;
  r.trace = st.out.trace;
  r.reported_bytes = st.out.reported_sent + st.out.reported_received;
  return r;
}

// Clears everything of the slot's previous process; the slot itself (identity, wiring, links,
// clock, timer sequence) stays.
template <class State>
void reset_process(State& st, uint32_t incarnation) {
  DILOCO_CHECK(incarnation >= st.incarnation, "a slot's process numbers went backwards");
  State fresh;
  fresh.env = std::move(st.env);
  fresh.id = st.id;
  fresh.dir = std::move(st.dir);
  fresh.out = std::move(st.out);
  fresh.tick_seq = st.tick_seq;
  fresh.incarnation = incarnation;
  st = std::move(fresh);
  st.out.reseed_links(*st.env, incarnation);
}

// An elastic learner's capacity_msg: taken only with a working share in [0, 1] and a pause
// that is not negative; otherwise counted as rejected.
template <class State>
bool capacity_valid(State& st, const capacity_msg& msg) {
  if (msg.capacity >= 0.0 && msg.capacity <= 1.0 && msg.pause_ns >= 0) return true;
  ++st.rejected;
  return false;
}
// Its effect: the working share, and a pause that ends no earlier than one under way.
template <class State>
void take_capacity(State& st, const capacity_msg& msg, int64_t now_ns) {
  DILOCO_CHECK(msg.capacity >= 0.0 && msg.capacity <= 1.0 && msg.pause_ns >= 0,
               "a capacity taken without capacity_valid");
  st.capacity = msg.capacity;
  st.paused_until_ns = std::max(st.paused_until_ns, now_ns + msg.pause_ns);
}

// A shard's process ended (closed_msg of incarnation `inc`) or a successor started (peer_msg):
// the learner's view of shard s. Returns whether the shard is now down.
inline bool shard_closed(std::vector<bool>& down, std::vector<uint32_t>& known, uint32_t s,
                         uint32_t inc) {
  DILOCO_CHECK(known.size() == down.size(), "the shard views disagree in length");
  if (s >= down.size() || inc < known[s]) return false;  // about an older process
  known[s] = inc;
  down[s] = true;
  return true;
}
inline bool shard_started(std::vector<bool>& down, std::vector<uint32_t>& known, uint32_t s,
                          uint32_t inc) {
  DILOCO_CHECK(known.size() == down.size(), "the shard views disagree in length");
  if (s >= down.size() || inc <= known[s]) return false;
  known[s] = inc;
  down[s] = false;
  return true;
}

}  // namespace diloco
