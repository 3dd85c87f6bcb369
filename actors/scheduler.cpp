#include "actors/scheduler.hpp"
#include "base/check.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "actors/pace.hpp"
#include "actors/state_io.hpp"
#include "runtime/snapshot.hpp"

namespace diloco {

std::vector<uint32_t> fragment_offsets(schedule_pattern pattern, uint32_t fragments,
                                       uint32_t period) {
  DILOCO_CHECK(fragments > 0 && period > 0, "scheduler: fragments and H were validated");
  std::vector<uint32_t> offsets(fragments);
  for (uint32_t p = 0; p < fragments; ++p) {
    offsets[p] = pattern == schedule_pattern::strided
                     ? static_cast<uint32_t>(uint64_t{p} * period / fragments)
                     : p % period;
    DILOCO_CHECK(offsets[p] < period, "scheduler: a fragment's offset is within the period");
  }
  return offsets;
}

uint32_t max_in_flight(const std::vector<uint32_t>& offsets, uint32_t period) {
  DILOCO_CHECK(period > 0, "scheduler: H was validated");
  std::vector<uint32_t> per_step(period, 0);
  for (uint32_t o : offsets) per_step[o % period] += 1;
  return *std::max_element(per_step.begin(), per_step.end());
}

namespace {

using self_ptr = scheduler_actor::stateful_pointer<scheduler_state>;

// The schedule as the scheduler holds it now, for a learner.
schedule_msg schedule_now(self_ptr self) {
  auto& st = self->state;
  const run_config& rc = st.env->config;
  // A learner refuses a schedule without one offset per fragment.
  DILOCO_CHECK(st.offsets.size() == static_cast<size_t>(rc.fragments),
               "fragment scheduler: an offset per fragment");
  schedule_msg m{st.out.make_stamp(now_ns(self)),
                 st.period,
                 st.overlap,
                 st.offsets,
                 rc.clock == schedule_clock::global,
                 st.epoch_ns,
                 to_ns(rc.speed.step_time_s)};
  m.from_step = st.from_step;
  m.change = st.change;
  return m;
}

// The shared clock's step now (the learners' schedule step on a global clock).
uint64_t step_now(self_ptr self) {
  const auto& st = self->state;
  const int64_t step_ns = std::max<int64_t>(1, to_ns(st.env->config.speed.step_time_s));
  const int64_t t = now_ns(self) - st.epoch_ns;
  return t <= 0 ? 0 : static_cast<uint64_t>(t / step_ns);
}

// "learner 3", or "regional syncer 1" for a member past the learners.
std::string member_name(const scheduler_state& st, uint32_t member) {
  const uint32_t learners = st.env->ids.learners;
  return member < learners ? "learner " + std::to_string(member)
                           : "regional syncer " + std::to_string(member - learners);
}

// Adaptive inner steps: a learner's measurements (or a regional syncer's, of its wide-area
// link), as the H and tau it needs; they move when the largest needs among the members
// reporting say so (pace.hpp, choose_pace). A change holds from a step a little ahead on the
// shared clock (every learner switches at the same step), or from each learner's next step on
// their own clocks.
void on_pace(self_ptr self, const pace_msg& msg) {
  auto& st = self->state;
  const run_config& rc = st.env->config;
  if (!rc.period_auto.enabled || msg.learner >= st.env->ids.members() ||
      msg.st.sender != st.env->ids.member(msg.learner) || !(msg.bits_per_ns > 0) ||
      !std::isfinite(msg.bits_per_ns) || msg.step_ns <= 0 || msg.latency_ns < 0 ||
      msg.round_ns < 0 || msg.change > st.change) {
    ++st.rejected;
    spdlog::warn("fragment scheduler: rejected pace report from member {}", msg.learner);
    return;
  }
  if (msg.change < st.change) return;  // measured under an earlier H: its queues say little now
  link_estimate e;
  e.ok = true;
  e.bits_per_ns = msg.bits_per_ns;
  e.latency_ns = msg.latency_ns;
  e.period_bytes = msg.period_bytes;
  e.round_ns = msg.round_ns;
  const pace_need need = needed(e, msg.step_ns, rc.period_auto.target_load);
  const int64_t now = now_ns(self);
  st.needs[msg.learner] = period_need{need.period, need.overlap, msg.change, now};
  spdlog::debug(
      "fragment scheduler: {} at change {}: {:.4g} Gbit/s, {:.4g} ms, {} bytes "
      "per period, round {:.4g} s: needs H >= {:.2f}, tau >= {:.2f}",
      member_name(st, msg.learner), msg.change, msg.bits_per_ns,
      static_cast<double>(msg.latency_ns) * 1e-6, msg.period_bytes,
      static_cast<double>(msg.round_ns) * 1e-9, need.period, need.overlap);
  // The learners heard from within the last two periods (one that left stops counting), each
  // by its latest report; a move down waits until all of them measured the current schedule.
  const int64_t fresh_ns = 2 * static_cast<int64_t>(st.period) * msg.step_ns;
  pace_need most;
  bool all_current = true;
  for (const auto& [id, n] : st.needs) {
    if (now - n.at_ns > fresh_ns) continue;
    most.period = std::max(most.period, n.period);
    most.overlap = std::max(most.overlap, n.overlap);
    all_current = all_current && n.change == st.change;
  }
  pace_bounds bounds;
  bounds.period_lo = static_cast<uint32_t>(rc.period_min());
  bounds.period_hi = static_cast<uint32_t>(rc.period_auto.max_steps);
  bounds.overlap_lo = static_cast<uint32_t>(rc.overlap_steps);
  const pace_choice now_at{st.period, st.overlap};
  pace_choice next = choose_pace(now_at, most, bounds);
  if (!all_current) {  // only up until everyone measured the schedule in force
    next.overlap = std::max(next.overlap, st.overlap);
    next.period = std::max(next.period, st.period);
  }
  if (next.period == st.period && next.overlap == st.overlap) return;
  const bool global = rc.clock == schedule_clock::global;
  const uint64_t lead = 2 + static_cast<uint64_t>(2 * msg.latency_ns / msg.step_ns);
  st.from_step = global ? step_now(self) + lead : 0;
  spdlog::info(
      "fragment scheduler: H {} -> {}, tau {} -> {} from step {} ({}: {:.3g} Gbit/s, "
      "{:.3g} ms one way, a fragment's round {:.3g} s, {:.3g} MB per period on its busiest link)",
      st.period, next.period, st.overlap, next.overlap,
      global ? std::to_string(st.from_step) : std::string("each learner's next"),
      member_name(st, msg.learner), msg.bits_per_ns, static_cast<double>(msg.latency_ns) * 1e-6,
      static_cast<double>(msg.round_ns) * 1e-9, static_cast<double>(msg.period_bytes) * 1e-6);
  st.period = next.period;
  st.overlap = next.overlap;
  st.change += 1;
  st.offsets = fragment_offsets(rc.schedule, static_cast<uint32_t>(rc.fragments), next.period);
  for (uint32_t l = 0; l < st.dir->learners.size(); ++l)
    post(self, direct(st.env->ids.learner(l), st.dir->learners[l]), schedule_now(self));
  // The regional syncers measure their wide-area links under it too.
  for (uint32_t r = 0; r < st.dir->regionals.size(); ++r)
    post(self, direct(st.env->ids.regional(r), st.dir->regionals[r]), schedule_now(self));
}

}  // namespace

scheduler_actor::behavior_type fragment_scheduler(
    scheduler_actor::stateful_pointer<scheduler_state> self, std::shared_ptr<const actor_env> env,
    directory_ptr dir) {
  auto& init = self->state;
  init.env = env;
  init.dir = std::move(dir);
  const run_config& c = env->config;
  init.period = static_cast<uint32_t>(c.period_steps);
  init.overlap = static_cast<uint32_t>(c.overlap_steps);
  init.offsets = fragment_offsets(c.schedule, static_cast<uint32_t>(c.fragments), init.period);
  init.out.init(*env, env->ids.scheduler());
  return {
      [=](rewire_msg& m) { on_rewire(self->state, m); },
      [=](start_msg& msg) {
        if (start_or_restore(self, msg)) return;
        self->state.epoch_ns = now_ns(self);
      },
      [=](marker_msg& m) { on_marker(self, m); },
      received(self,
               [=](join_msg& msg) {
                 auto& st = self->state;
                 // A learner, or a regional syncer that measures its wide-area link under
                 // adaptive inner steps (the shards' members, actor_indices::member).
                 if (msg.learner >= st.env->ids.members() ||
                     msg.st.sender != st.env->ids.member(msg.learner)) {
                   ++st.rejected;
                   spdlog::warn("fragment scheduler: rejected join from member {}", msg.learner);
                   return;
                 }
                 post(self, direct(st.env->ids.member(msg.learner), st.dir->member(msg.learner)),
                      schedule_now(self));
               }),
      received(self, [=](pace_msg& msg) { on_pace(self, msg); }),
  };
}

}  // namespace diloco
