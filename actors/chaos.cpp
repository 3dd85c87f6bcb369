#include "actors/chaos.hpp"
#include "base/check.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "actors/cost_learner.hpp"
#include "actors/dp_learner.hpp"
#include "actors/metrics.hpp"
#include "actors/state_io.hpp"
#include "actors/syncer.hpp"
#include "runtime/snapshot.hpp"

namespace diloco {

namespace {

using self_ptr = supervisor_actor::stateful_pointer<chaos_state>;

const run_config& cfg(self_ptr self) {
  return self->state.env->config;
}

template <class Handle, class Msg>
void tell(self_ptr self, uint32_t index, const Handle& to, Msg msg) {
  auto& st = self->state;
  msg.st = st.out.make_stamp(now_ns(self));
  post(self, direct(index, to), std::move(msg));
}

template <class Msg>
void tell_learner(self_ptr self, uint32_t i, Msg msg) {
  DILOCO_CHECK(i < self->state.dir->learners.size(), "chaos: a learner slot of the run");
  tell(self, self->state.env->ids.learner(i), self->state.dir->learners[i], std::move(msg));
}

// Integrates the uptime up to now. Learners go down or start a pause only at this actor's
// events (which account first), so between two events the only changes are pause ends: once
// some learner computes, it computes until now.
// Nothing after the run's stop: timers still pending then (a failure drawn for later) must not
// stretch the run's chip-time and uptime past its end.
void account_uptime(self_ptr self) {
  auto& st = self->state;
  if (st.stopped) return;
  const int64_t now = now_ns(self);
  DILOCO_CHECK(now >= st.accounted_ns, "chaos: uptime is accounted forward in time");
  DILOCO_CHECK(st.chips.size() >= st.learners.size(), "chaos: the chips of every learner slot");
  for (uint32_t i = 0; i < st.learners.size(); ++i) {
    const auto& l = st.learners[i];
    if (!l.member) continue;
    const double chips = st.chips[i];
    st.report.provisioned_chip_s += chips * to_s(now - st.accounted_ns);
    if (l.down) continue;
    const int64_t from = std::max(st.accounted_ns, l.paused_until_ns);
    if (from < now) st.report.computing_chip_s += chips * l.capacity * to_s(now - from);
  }
  for (int64_t t = st.accounted_ns; t < now;) {
    int64_t next_pause_end = now;
    bool computing = false;
    for (const auto& l : st.learners) {
      if (l.down) continue;
      if (l.paused_until_ns <= t) {
        computing = true;  // then the pause ends do not matter
        break;
      }
      next_pause_end = std::min(next_pause_end, l.paused_until_ns);
    }
    if (computing) {
      st.report.uptime_s += to_s(now - t);
      break;
    }
    t = next_pause_end;
  }
  // Monotone rounding keeps this exact: a member computes at most its chips, for at most the
  // time it is provisioned.
  DILOCO_CHECK(st.report.computing_chip_s <= st.report.provisioned_chip_s,
               "chaos: chips compute only while they are provisioned");
  st.accounted_ns = now;
}

void kill(self_ptr self, uint32_t i) {
  DILOCO_CHECK(i < self->state.learners.size(), "chaos: a learner index in range");
  auto& l = self->state.learners[i];
  DILOCO_CHECK(!l.down, "chaos: only a learner that is up is killed");
  spdlog::debug("chaos: killing learner {} (incarnation {})", i, l.incarnation);
  tell_learner(self, i, kill_msg{});
  l.down = true;
  self->state.report.kills += 1;
}

void restart(self_ptr self, uint32_t i) {
  DILOCO_CHECK(i < self->state.learners.size(), "chaos: a learner index in range");
  auto& l = self->state.learners[i];
  DILOCO_CHECK(l.down, "chaos: only a learner that is down is restarted");
  l.incarnation += 1;
  spdlog::debug("chaos: restarting learner {} (incarnation {})", i, l.incarnation);
  tell_learner(self, i, restart_msg{stamp{}, l.incarnation});
  l.down = false;
  self->state.report.restarts += 1;
}

// Elastic: tell the learner its working share; a shrink pauses it for a rescale unless one is
// already under way (the failure joins that rescale). Taking a repaired unit back costs no
// pause. With failures absorbed like this the pauses form a renewal process, as the
// recoveries of non-elastic learners do.
void rescale(self_ptr self, uint32_t i, bool shrink) {
  auto& st = self->state;
  DILOCO_CHECK(i < st.learners.size(), "chaos: a learner index in range");
  auto& l = st.learners[i];
  DILOCO_CHECK(l.member, "chaos: only a member learner is rescaled");
  DILOCO_CHECK(l.failed_units > 0 || !shrink, "chaos: a shrink without a failed unit");
  const auto& fm = cfg(self).interruptions;
  const double lost = static_cast<double>(l.failed_units) * fm.unit_chips /
                      static_cast<double>(cfg(self).chips_of(i));
  const double capacity = std::max(0.0, 1.0 - lost);
  l.capacity = capacity;
  const int64_t now = now_ns(self);
  if (shrink && l.paused_until_ns <= now) {
    l.paused_until_ns = now + to_ns(fm.rescale_s);
    st.report.rescales += 1;
  }
  // The pause left of a rescale under way, if any: a repair needs none of its own (and a
  // negative pause would have the learner reject the message, and the unit, as invalid).
  const int64_t pause = std::max<int64_t>(0, l.paused_until_ns - now);
  tell_learner(self, i, capacity_msg{stamp{}, capacity, pause});
}

void schedule_failure(self_ptr self, uint32_t i) {
  DILOCO_CHECK(i < self->state.learners.size(), "chaos: a learner index in range");
  auto& l = self->state.learners[i];
  const auto& fm = cfg(self).interruptions;
  const double rate_per_s = static_cast<double>(cfg(self).chips_of(i)) / (fm.mtbi_hours * 3600.0);
  DILOCO_CHECK(rate_per_s > 0.0 && std::isfinite(rate_per_s),
               "chaos: failures come at a positive, finite rate (validated MTBI and chips)");
  const double wait_s = l.failures.exponential(rate_per_s);
  set_timer(self, self->state.out, to_ns(wait_s), chaos_tick{i, chaos_event::failure, 0});
}

void on_chaos_tick(self_ptr self, const chaos_tick& tick) {
  auto& st = self->state;
  account_uptime(self);
  if (st.stopped || tick.learner >= st.learners.size()) return;
  auto& l = st.learners[tick.learner];
  if (!l.member) return;  // left: its chips (and their failures) are no longer ours
  const auto& fm = cfg(self).interruptions;
  switch (tick.kind) {
    case chaos_event::failure:
      schedule_failure(self, tick.learner);
      if (fm.elastic) {
        st.report.interruptions += 1;
        l.failed_units += 1;
        rescale(self, tick.learner, true);
        set_timer(self, self->state.out, to_ns(fm.recovery_s),
                  chaos_tick{tick.learner, chaos_event::repair, l.incarnation});
      } else if (!l.down) {
        // A failure while already down is part of the same outage: the chips are being replaced.
        st.report.interruptions += 1;
        kill(self, tick.learner);
        set_timer(self, self->state.out, to_ns(fm.recovery_s),
                  chaos_tick{tick.learner, chaos_event::restart, l.incarnation});
      }
      break;
    case chaos_event::restart:
      if (l.down && l.member && tick.incarnation == l.incarnation) restart(self, tick.learner);
      break;
    case chaos_event::repair:
      DILOCO_CHECK(fm.elastic, "chaos: a repair only of an elastic learner's unit");
      if (l.failed_units > 0) {
        l.failed_units -= 1;
        rescale(self, tick.learner, false);
      }
      break;
  }
}

void on_membership(self_ptr self, const membership_tick& tick) {
  auto& st = self->state;
  account_uptime(self);
  if (st.stopped) return;
  DILOCO_CHECK(tick.event < cfg(self).membership.size(), "chaos: a membership event of the run");
  const membership_event& m = cfg(self).membership[tick.event];
  DILOCO_CHECK(m.learner < st.learners.size(), "chaos: a membership event names a learner slot");
  auto& l = st.learners[m.learner];
  if (m.join && !l.member) {
    if (l.ran) l.incarnation += 1;  // it was here before
    spdlog::info("chaos: learner {} joins", m.learner);
    tell_learner(self, m.learner, restart_msg{stamp{}, l.incarnation});
    l.ran = true;
    l.member = true;
    l.down = false;
    if (cfg(self).interruptions.enabled()) schedule_failure(self, m.learner);
  } else if (!m.join && l.member) {
    spdlog::info("chaos: learner {} leaves", m.learner);
    if (!l.down) tell_learner(self, m.learner, leave_msg{});
    l.member = false;
    l.down = false;
  }
}

// A regional syncer's restart event (events past the shards' restarts): its slot's process
// dies, and a new one starts down_s later. It recovers from the shards and tells its learners.
void on_regional_tick(self_ptr self, const shard_tick& tick) {
  auto& st = self->state;
  const run_config& c = cfg(self);
  const size_t e = tick.event - c.shard_restarts.size();
  DILOCO_CHECK(e < c.regional_restarts.size(), "chaos: a regional syncer restart of the run");
  const regional_restart_event& ev = c.regional_restarts[e];
  const auto which = c.regional_regions();
  uint32_t r = 0;
  while (r < which.size() && c.regions[which[r]].name != ev.region) ++r;
  DILOCO_CHECK(r < which.size() && r < st.dir->regionals.size(),
               "chaos: a regional syncer restart names a regional syncer of the run");
  const uint32_t slot = st.env->ids.shards + r;
  DILOCO_CHECK(slot < st.shard_incarnation.size(), "chaos: a view of every shard slot");
  if (!tick.restart) {
    spdlog::info("chaos: killing the regional syncer of {}", ev.region);
    tell(self, st.env->ids.regional(r), st.dir->regionals[r], kill_msg{});
    st.report.shard_restarts += 1;
    set_timer(self, st.out, to_ns(ev.down_s), shard_tick{tick.event, true});
    return;
  }
  spdlog::info("chaos: restarting the regional syncer of {} (recovering from the shards)",
               ev.region);
  const uint32_t inc = ++st.shard_incarnation[slot];
  tell(self, st.env->ids.regional(r), st.dir->regionals[r], restart_msg{stamp{}, inc});
}

void on_shard_tick(self_ptr self, const shard_tick& tick) {
  auto& st = self->state;
  if (st.stopped) return;
  if (tick.event >= cfg(self).shard_restarts.size()) return on_regional_tick(self, tick);
  const shard_restart_event& r = cfg(self).shard_restarts[tick.event];
  DILOCO_CHECK(r.shard < st.dir->shards.size() && r.shard < st.shard_incarnation.size(),
               "chaos: a shard restart names a shard of the run");
  if (!tick.restart) {
    spdlog::info("chaos: killing syncer shard {}", r.shard);
    tell(self, st.env->ids.shard(r.shard), st.dir->shards[r.shard], kill_msg{});
    st.report.shard_restarts += 1;
    set_timer(self, self->state.out, to_ns(r.down_s), shard_tick{tick.event, true});
    return;
  }
  spdlog::info("chaos: restarting syncer shard {} (recovering from the learners' copies)", r.shard);
  const uint32_t inc = ++st.shard_incarnation[r.shard];
  tell(self, st.env->ids.shard(r.shard), st.dir->shards[r.shard], restart_msg{stamp{}, inc});
  for (uint32_t i = 0; i < st.learners.size(); ++i) {
    const auto& l = st.learners[i];
    if (l.member && !l.down) tell_learner(self, i, peer_msg{stamp{}, r.shard, inc});
  }
  // The regional syncers are members of the shard too.
  for (uint32_t g = 0; g < st.dir->regionals.size(); ++g)
    tell(self, st.env->ids.regional(g), st.dir->regionals[g], peer_msg{stamp{}, r.shard, inc});
}

// The first processes run on the first `learners` slots (the learners start themselves);
// the failure processes and the scripted events begin.
void start(self_ptr self) {
  auto& st = self->state;
  const run_config& c = st.env->config;
  st.start_ns = now_ns(self);
  st.accounted_ns = st.start_ns;
  const auto M = static_cast<uint32_t>(c.learners);
  const auto capacity = static_cast<uint32_t>(c.learner_capacity());
  DILOCO_CHECK(M <= capacity && capacity == st.dir->learners.size(),
               "chaos: a slot for every learner, the first ones running");
  st.learners.resize(capacity);
  // Every shard slot: the shards, then the regional syncers.
  st.shard_incarnation.assign(static_cast<size_t>(c.shards) + st.env->ids.regionals, 0);
  for (uint32_t i = 0; i < capacity; ++i) {
    st.learners[i].failures.reseed(derive_seed(c.seed, "chaos.interruptions", i));
  }
  for (uint32_t i = 0; i < M; ++i) {
    st.learners[i].member = true;
    st.learners[i].ran = true;
    if (c.interruptions.enabled()) schedule_failure(self, i);
  }
  for (uint32_t e = 0; e < c.membership.size(); ++e) {
    set_timer(self, st.out, to_ns(c.membership[e].at_s), membership_tick{e});
  }
  for (uint32_t e = 0; e < c.shard_restarts.size(); ++e) {
    set_timer(self, st.out, to_ns(c.shard_restarts[e].at_s), shard_tick{e, false});
  }
  const auto shard_events = static_cast<uint32_t>(c.shard_restarts.size());
  for (uint32_t e = 0; e < c.regional_restarts.size(); ++e) {
    set_timer(self, st.out, to_ns(c.regional_restarts[e].at_s),
              shard_tick{shard_events + e, false});
  }
  for (uint32_t e = 0; e < c.failures.size(); ++e) {
    set_timer(self, st.out, to_ns(c.failures[e].at_s), fault_tick{e, false});
  }
}

}  // namespace

supervisor_actor::behavior_type chaos(supervisor_actor::stateful_pointer<chaos_state> self,
                                      std::shared_ptr<const actor_env> env, directory_ptr dir) {
  auto& init = self->state;
  init.env = env;
  init.dir = std::move(dir);
  init.out.init(*env, env->ids.chaos());
  // The uptime integral reads every slot's chips at every event.
  for (uint32_t i = 0; i < static_cast<uint32_t>(env->config.learner_capacity()); ++i)
    init.chips.push_back(static_cast<double>(env->config.chips_of(i)));
  return {
      // The timer of every interruption first: CAF tries the handlers in order.
      [=](chaos_tick tick) -> one_way {
        timer_fired(self, tick);
        on_chaos_tick(self, tick);
        return {};
      },
      [=](rewire_msg& m) { on_rewire(self->state, m); },
      [=](start_msg& msg) {
        if (start_or_restore(self, msg)) return;
        start(self);
      },
      [=](marker_msg& m) { on_marker(self, m); },
      [=](fault_tick tick) {
        timer_fired(self, tick);
        auto& st = self->state;
        account_uptime(self);
        DILOCO_CHECK(tick.event < cfg(self).failures.size(),
                     "chaos: a scripted failure of the run");
        const failure_event& f = cfg(self).failures[tick.event];
        if (st.stopped) return;
        DILOCO_CHECK(f.learner < st.learners.size(),
                     "chaos: a scripted failure names a learner slot");
        auto& l = st.learners[f.learner];
        if (!tick.restart) {
          if (l.down || !l.member) return;
          spdlog::info("chaos: killing learner {} (incarnation {})", f.learner, l.incarnation);
          kill(self, f.learner);
          set_timer(self, self->state.out, to_ns(f.down_s), fault_tick{tick.event, true});
        } else if (l.down) {
          restart(self, f.learner);
          spdlog::info("chaos: restarted learner {} (incarnation {})", f.learner, l.incarnation);
        }
      },
      [=](membership_tick tick) {
        timer_fired(self, tick);
        on_membership(self, tick);
      },
      [=](shard_tick tick) {
        timer_fired(self, tick);
        on_shard_tick(self, tick);
      },
      received(self,
               [=](stop_msg&) {
                 auto& st = self->state;
                 account_uptime(self);
                 st.stopped = true;
               }),
      [=](report_request) {
        auto& st = self->state;
        if (!st.stopped) account_uptime(self);
        supervisor_report r = st.report;
        r.observed_s = to_s(st.accounted_ns - st.start_ns);
        r.trace = st.out.trace;
        for (uint32_t i = 0; i < st.learners.size(); ++i) {
          if (st.learners[i].member && !st.learners[i].down)
            r.learners.push_back(st.dir->learners[i]);
        }
        r.shards = st.dir->shards;
        return r;
      },
  };
}

}  // namespace diloco
