#include "actors/cost_learner.hpp"
#include "base/check.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "actors/learner_common.hpp"
#include "actors/metrics.hpp"
#include "actors/state_io.hpp"
#include "runtime/snapshot.hpp"
#include "tensor/codec.hpp"

namespace diloco {

namespace {

using self_ptr = learner_actor::stateful_pointer<cost_learner_state>;

const run_config& cfg(self_ptr self) {
  return self->state.env->config;
}

uint64_t schedule_step(self_ptr self) {
  const auto& st = self->state;
  const int64_t t = now_ns(self) - st.epoch_ns;
  return t <= 0 ? 0 : static_cast<uint64_t>(t / st.step_ns);
}

void draw_factor(self_ptr self) {
  auto& st = self->state;
  st.factor = draw_speed_factor(cfg(self).speed_of(st.id), st.speed_rng);
}

// Work done since the last accounting: computing time (outside pauses) at the current
// capacity, as steps per fragment and chip-seconds.
void account(self_ptr self) {
  auto& st = self->state;
  const int64_t now = now_ns(self);
  DILOCO_CHECK(now >= st.accounted_ns, "cost learner: work is accounted forward in time");
  const int64_t start = std::max(st.accounted_ns, st.paused_until_ns);
  st.accounted_ns = now;
  if (st.now != cost_learner_state::phase::running || now <= start || st.capacity <= 0.0) return;
  const int64_t dt = now - start;
  const double step_s = cfg(self).speed_of(st.id).step_time_s * st.factor / st.capacity;
  DILOCO_CHECK(step_s > 0.0 && std::isfinite(step_s), "cost learner: a step takes a positive time");
  const double steps = to_s(dt) / step_s;
  for (auto& f : st.frags) f.steps += steps;
  st.steps_done += steps;
  st.meter.steps += steps;
  const double chips = static_cast<double>(cfg(self).chips_of(st.id)) * st.capacity;
  st.chip_s += chips * to_s(dt);
  st.busy_ns += dt;
  st.meter.add_busy(dt, chips);
}

void report_progress(self_ptr self) {
  send_progress(self, static_cast<uint64_t>(cfg(self).batch_of(self->state.id)));
}

void send_delta(self_ptr self, uint32_t p, uint64_t step, bool final) {
  auto& st = self->state;
  DILOCO_CHECK(p < st.frags.size(), "cost learner: a fragment index in range");
  auto& f = st.frags[p];
  DILOCO_CHECK(f.steps >= 0.0, "cost learner: a fragment's work is not negative");
  // The shard's duplicate filter drops a regular send at a step it has seen from this learner.
  DILOCO_CHECK(final || step > f.sent_step, "cost learner: a fragment's sends go at rising steps");
  outer_gradient_msg msg;
  msg.st = st.out.make_stamp(now_ns(self));
  msg.fragment = p;
  msg.learner = st.id;
  msg.base_version = f.version;
  msg.steps = static_cast<uint64_t>(std::llround(f.steps));
  msg.tokens = msg.steps * static_cast<uint64_t>(cfg(self).batch_of(st.id));
  msg.send_step = step;
  msg.step_time_ns = st.step_ns;
  msg.deadline_ns =
      st.epoch_ns + static_cast<int64_t>(step + st.schedule.overlap_steps) * st.step_ns;
  msg.final = final;
  // No values: the message costs what the encoded fragment would.
  const uint64_t bytes =
      encoded_bytes(cfg(self).uplink, st.env->plan.fragments[p].size) + message_overhead_bytes;
  post_to(self, route_of(st, p), std::move(msg), bytes);
  f.steps = 0.0;
  f.awaiting = true;
  f.sent_step = step;
}

// Sleeps until the next schedule step at which some fragment falls due.
void schedule_next(self_ptr self) {
  auto& st = self->state;
  const auto next = static_cast<int64_t>(st.schedule.next_due_after(st.last_step));
  DILOCO_CHECK(static_cast<uint64_t>(next) > st.last_step,
               "cost learner: the next due step is not after the last one");
  ++st.tick_seq;
  const int64_t at = st.epoch_ns + static_cast<int64_t>(next) * st.step_ns;
  set_timer(self, self->state.out, std::max<int64_t>(0, at - now_ns(self)), step_tick{st.tick_seq});
}

void wake(self_ptr self) {
  auto& st = self->state;
  account(self);
  draw_factor(self);
  const uint64_t now = schedule_step(self);
  DILOCO_CHECK(now >= st.last_step, "cost learner: the schedule step went backwards");
  for (uint32_t p = 0; p < st.frags.size(); ++p) {
    if (st.shard_down[route_of(st, p)]) continue;  // the work waits for the shard's successor
    if (const uint64_t k = st.schedule.due_step(p, st.last_step, now); k > 0)
      send_delta(self, p, k, false);
  }
  st.last_step = now;
  report_progress(self);
  schedule_next(self);
}

void start_running(self_ptr self) {
  auto& st = self->state;
  DILOCO_CHECK(st.step_ns > 0, "cost learner: running without a step length");
  DILOCO_CHECK(
      st.now == cost_learner_state::phase::joining || st.now == cost_learner_state::phase::pulling,
      "cost learner: only a joining or pulling process starts running");
  st.now = cost_learner_state::phase::running;
  st.accounted_ns = now_ns(self);
  st.last_step = schedule_step(self);
  draw_factor(self);
  schedule_next(self);
}

void begin_process(self_ptr self, uint32_t incarnation) {
  auto& st = self->state;
  reset_process(st, incarnation);
  DILOCO_CHECK(st.frags.empty(), "cost learner: a fresh process starts from nothing");
  st.now = cost_learner_state::phase::joining;
  st.frags.resize(st.env->plan.fragments.size());
  reset_views(st);
  st.speed_rng.reseed(
      derive_seed(cfg(self).seed, "learner.speed", (uint64_t{st.id} << 32) | incarnation));
  announce_join(self, *st.env, st.out, *st.dir, st.id, incarnation > 0, true);
}

void end_process(self_ptr self, cost_learner_state::phase why) {
  auto& st = self->state;
  DILOCO_CHECK(why == cost_learner_state::phase::down || why == cost_learner_state::phase::absent,
               "cost learner: a process ends down or absent");
  close_learner_links(self, *st.env, st.out, *st.dir, st.incarnation, regional_of(st));
  reset_process(st, st.incarnation);
  st.now = why;
}

// A merged fragment (its version only: the cost model has no parameters).
void on_fragment_update(self_ptr self, const fragment_update_msg& msg) {
  auto& st = self->state;
  if (msg.fragment >= st.frags.size() || msg.to_version < msg.from_version) {
    ++st.rejected;
    return;
  }
  auto& f = st.frags[msg.fragment];
  f.version = std::max(f.version, msg.to_version);
  if (msg.reply_to_step > 0) f.awaiting = false;
  if (st.now == cost_learner_state::phase::pulling && msg.full) {
    DILOCO_CHECK(st.pulls_outstanding > 0, "cost learner: pulling with no fragment to come");
    if (--st.pulls_outstanding == 0) start_running(self);
  }
}

// The fragment schedule: a joining learner starts running (or, restarted, pulls first).
void on_schedule(self_ptr self, const schedule_msg& msg) {
  auto& st = self->state;
  // The schedule is checked against the fragments a live process holds: all of them.
  DILOCO_CHECK(st.frags.size() == st.env->plan.fragments.size(),
               "cost learner: a schedule reaches a process with every fragment");
  // A cost run is on the shared clock: a schedule must say its step time.
  if (!msg.global_clock || msg.step_ns <= 0 || !st.schedule.adopt(msg, st.frags.size()).empty()) {
    ++st.rejected;
    return;
  }
  st.epoch_ns = msg.epoch_ns;
  st.step_ns = msg.step_ns;
  if (st.now != cost_learner_state::phase::joining) return;
  if (st.incarnation == 0) {
    start_running(self);
  } else {
    st.now = cost_learner_state::phase::pulling;
    st.pulls_outstanding = static_cast<uint32_t>(st.frags.size());
  }
}

// The budget is spent: the last progress and every fragment's final delta.
void on_stop(self_ptr self) {
  auto& st = self->state;
  if (st.now == cost_learner_state::phase::stopped) return;
  account(self);
  const bool ran = st.now == cost_learner_state::phase::running;
  DILOCO_CHECK(st.frags.size() == st.env->plan.fragments.size(),
               "cost learner: a live process stops with every fragment");
  st.now = cost_learner_state::phase::stopped;
  report_progress(self);
  for (uint32_t p = 0; p < st.frags.size(); ++p) {
    if (!ran) st.frags[p].steps = 0.0;
    send_delta(self, p, schedule_step(self), true);
  }
}

// Leaving the membership: its work so far goes to the shards, then the process ends.
void on_leave(self_ptr self) {
  auto& st = self->state;
  if (st.now == cost_learner_state::phase::running) {
    account(self);
    DILOCO_CHECK(st.shard_down.size() >= st.dir->shards.size(), "cost learner: a view per shard");
    for (uint32_t p = 0; p < st.frags.size(); ++p) {
      if (st.shard_down[route_of(st, p)]) continue;
      send_delta(self, p, std::max(schedule_step(self), st.frags[p].sent_step + 1), false);
    }
  }
  st.now = cost_learner_state::phase::stopped;
  report_progress(self);
  end_process(self, cost_learner_state::phase::absent);
}

// A restarted process that has not had every fragment yet: a join asks for them whole.
bool needs_fragments(const cost_learner_state& st) {
  return st.now == cost_learner_state::phase::pulling ||
         (st.now == cost_learner_state::phase::joining && st.incarnation > 0);
}

// A shard's or the regional syncer's process ended. Without its regional syncer the learner
// syncs with the shards directly.
void on_closed(self_ptr self, const closed_msg& msg) {
  auto& st = self->state;
  const int64_t slot = view_slot(st, msg.st.sender);
  if (slot < 0 || !shard_closed(st.shard_down, st.shard_incarnation, static_cast<uint32_t>(slot),
                                msg.incarnation))
    return;
  const auto shards = static_cast<uint32_t>(st.dir->shards.size());
  if (static_cast<uint32_t>(slot) != shards) return;
  for (auto& f : st.frags) f.awaiting = false;  // what it had not answered is lost
  for (uint32_t k = 0; k < shards; ++k) {
    if (!st.shard_down[k])
      post_to(self, k, join_msg{st.out.make_stamp(now_ns(self)), st.id, needs_fragments(st)});
  }
}

// A shard's new process, or the regional syncer's: the learner joins it when it syncs there
// (it leaves the shards when its regional syncer is back).
void on_peer(self_ptr self, const peer_msg& msg) {
  auto& st = self->state;
  const int64_t slot = peer_slot(st, msg);
  if (slot < 0) {
    ++st.rejected;
    return;
  }
  const auto s = static_cast<uint32_t>(slot);
  const auto shards = static_cast<uint32_t>(st.dir->shards.size());
  if (!shard_started(st.shard_down, st.shard_incarnation, s, msg.incarnation)) return;
  if (s < shards) {
    if (!via_regional(st))
      post_to(self, s, join_msg{st.out.make_stamp(now_ns(self)), st.id, false});
    return;
  }
  if (st.now == cost_learner_state::phase::stopped) return;
  for (uint32_t k = 0; k < shards; ++k) {
    if (!st.shard_down[k])
      post_to(self, k, closed_msg{st.out.make_stamp(now_ns(self)), st.incarnation});
  }
  for (auto& f : st.frags) f.awaiting = false;
  post_to(self, shards, join_msg{st.out.make_stamp(now_ns(self)), st.id, needs_fragments(st)});
}

}  // namespace

learner_actor::behavior_type cost_learner(learner_actor::stateful_pointer<cost_learner_state> self,
                                          std::shared_ptr<const actor_env> env, uint32_t id,
                                          directory_ptr dir) {
  auto dead = open_learner_slot(self, env, id, std::move(dir));
  return learner_slot_behavior(
      self, [self](uint32_t inc) { begin_process(self, inc); },
      // The messages of every step and round first: CAF tries the handlers in order.
      [=](step_tick tick) -> one_way {
        timer_fired(self, tick);
        auto& st = self->state;
        if (tick.seq == st.tick_seq && st.now == cost_learner_state::phase::running) wake(self);
        return {};
      },
      when_live(self, dead,
                [=](capacity_msg& msg) {
                  if (!capacity_valid(self->state, msg)) return;
                  account(self);  // the work so far at the old capacity
                  take_capacity(self->state, msg, now_ns(self));
                }),
      when_live(self, dead, [=](fragment_update_msg& msg) { on_fragment_update(self, msg); }),
      when_live(self, dead, [=](schedule_msg& msg) { on_schedule(self, msg); }),
      when_live(self, dead, [=](reduced_gradient_msg&) { ++self->state.rejected; }),
      when_live(self, dead, [=](stop_msg&) { on_stop(self); }),
      when_live(self, dead, [=](leave_msg&) { on_leave(self); }),
      when_live(self, dead, [=](peer_msg& msg) { on_peer(self, msg); }),
      when_live(self, dead,
                [=](copy_request& msg) {
                  auto& st = self->state;
                  for (uint32_t p : msg.fragments) {
                    if (p >= st.frags.size()) continue;
                    const uint64_t bytes =
                        4 * st.env->plan.fragments[p].size + message_overhead_bytes;
                    const uint32_t s = st.env->shard_of[p];
                    post(self, over_link(st.env->ids.shard(s), st.dir->shards[s], bytes),
                         copy_msg{st.out.make_stamp(now_ns(self)), p, st.id, st.frags[p].version,
                                  tensor_blob()});
                  }
                }),
      when_live(self, dead, [=](kill_msg&) { end_process(self, cost_learner_state::phase::down); }),
      when_dormant(self, dead, [=](restart_msg& msg) { begin_process(self, msg.incarnation); }),
      when_live(self, dead, [=](closed_msg& msg) { on_closed(self, msg); }),
      [=](report_request) {
        auto& st = self->state;
        learner_report r = slot_report(st);
        r.steps = static_cast<uint64_t>(st.steps_done);
        r.tokens = r.steps * static_cast<uint64_t>(st.env->config.batch_of(st.id));
        return r;
      },
      [=](global_request) { return global_snapshot{}; });
}

}  // namespace diloco
