#include "actors/state_io.hpp"

#include <algorithm>
#include <cstdio>

#include "actors/chaos.hpp"
#include "actors/coordinator.hpp"
#include "actors/cost_learner.hpp"
#include "actors/dp_learner.hpp"
#include "actors/learner.hpp"
#include "actors/metrics.hpp"
#include "actors/scheduler.hpp"
#include "actors/syncer.hpp"
#include "protocol/persist.hpp"
#include "protocol/wire.hpp"
#include "runtime/snapshot.hpp"

namespace diloco {

// Field lists (protocol/persist.hpp). Everything an actor computes with is here; what is not
// here is wiring (env, dir, ctx), the snapshot agent, or scratch that every use overwrites.

template <class F>
void persist_fields(F& f, data_cursor& x) {
  f(x.streams, x.context, x.history, x.position, x.rng_state, x.shard_begin, x.shard_end, x.tokens);
}

template <class F>
void persist_fields(F& f, inner_trainer& x) {
  int64_t offset = x.schedule_offset();
  f(x.params(), x.grads(), x.optimizer().m, x.optimizer().v, x.optimizer().step, x.cursor(),
    offset);
  if constexpr (F::loading) {
    const size_t n = x.model().layout().buffer_floats();
    if (x.params().size() != n || x.grads().size() != n || x.optimizer().m.size() != n ||
        x.optimizer().v.size() != n) {
      throw persist_error{"the model's parameter count (" + std::to_string(n) +
                          ") does not match the saved one"};
    }
    x.set_schedule_offset(offset);
  }
}

template <class F>
void persist_fields(F& f, outbox& x) {
  std::vector<std::pair<timer_key, wire_message>> timers;
  if constexpr (!F::loading) {
    for (const auto& [k, m] : x.timers) timers.emplace_back(k, wire_message{m});
  }
  f(x.self_index, x.clock, x.link_rng, x.link_free_ns, x.last_arrival_ns, x.bytes_sent,
    x.messages_sent, x.bytes_received, x.lost[0], x.lost[1], x.lost_deltas[0], x.lost_deltas[1],
    x.duplicated, x.faults_off, x.reported_sent, x.reported_received, x.trace, timers, x.timer_seq);
  if constexpr (F::loading) {
    x.timers.clear();
    for (auto& [k, m] : timers) x.timers.emplace(k, std::move(m.msg));
  }
}

template <class F>
void persist_fields(F& f, fragment_sync& x) {
  f(x.global, x.version, x.reference, x.residual, x.tokens, x.steps, x.awaiting, x.awaiting_since,
    x.sent_step, x.unanswered, x.pull_since, x.reply_ready, x.last_reply_step, x.pulled,
    x.merge_at_step, x.version_at_loss);
}

namespace {

std::unique_ptr<inner_trainer> make_trainer(const actor_env& env, uint32_t id) {
  const run_config& c = env.config;
  return std::make_unique<inner_trainer>(c.model, env.data, c.batch, c.seed, static_cast<int>(id),
                                         c.learner_capacity());
}

// A trainer that exists or not (a slot without a process has none).
template <class F>
void optional_trainer(F& f, std::unique_ptr<inner_trainer>& t, const actor_env& env, uint32_t id) {
  bool has = t != nullptr;
  f(has);
  if constexpr (F::loading) t = has ? make_trainer(env, id) : nullptr;
  if (has) f(*t);
}

size_t largest_fragment(const actor_env& env) {
  size_t n = 0;
  for (const auto& f : env.plan.fragments) n = std::max(n, f.size);
  return n;
}

}  // namespace

template <class F>
void persist_fields(F& f, learner_state& x) {
  f(x.incarnation, x.tick_seq, x.out, x.now);
  optional_trainer(f, x.trainer, *x.env, x.id);
  f(x.frags, x.period_steps, x.overlap_steps, x.offsets, x.global_clock, x.epoch_ns, x.step_ns,
    x.last_step, x.capacity, x.paused_until_ns, x.pulls_outstanding, x.resume_step, x.wait_since_ns,
    x.speed_rng, x.step_time_ns_ema, x.late_updates, x.rejected, x.version_regressions,
    x.lost_shard_down, x.shard_down, x.shard_incarnation, x.duplicate_updates, x.resyncs,
    x.deltas_held, x.busy_ns, x.idle_ns, x.last_loss, x.report_steps, x.report_loss_sum,
    x.report_busy_ns, x.report_idle_ns, x.report_chip_s, x.measure_merge, x.loss_before_merge,
    x.report_gap_sum, x.report_gaps);
  if constexpr (F::loading) {
    if (x.trainer) {
      if (x.frags.size() != x.env->plan.fragments.size())
        throw persist_error{std::to_string(x.frags.size()) + " fragments saved, the run has " +
                            std::to_string(x.env->plan.fragments.size())};
      const size_t n = largest_fragment(*x.env);
      x.local = float_buffer(n);
      x.delta = float_buffer(n);
      x.decoded = float_buffer(n);
    }
  }
}

template <class F>
void persist_fields(F& f, dp_learner_state& x) {
  f(x.incarnation, x.tick_seq, x.out, x.alive);
  optional_trainer(f, x.trainer, *x.env, x.id);
  f(x.waiting, x.stopped, x.step, x.reduced, x.step_loss, x.step_ns, x.wait_since_ns, x.speed_rng,
    x.busy_ns, x.idle_ns, x.rejected, x.last_loss, x.report_steps, x.report_loss_sum,
    x.report_busy_ns, x.report_idle_ns, x.report_chip_s);
  if constexpr (F::loading) {
    if (x.trainer) {
      const size_t n = largest_fragment(*x.env);
      x.local = float_buffer(n);
      x.decoded = float_buffer(n);
    }
  }
}

template <class F>
void persist_fields(F& f, cost_fragment& x) {
  f(x.version, x.steps, x.awaiting, x.sent_step);
}

template <class F>
void persist_fields(F& f, cost_learner_state& x) {
  f(x.incarnation, x.tick_seq, x.out, x.now, x.pulls_outstanding, x.period_steps, x.overlap_steps,
    x.offsets, x.epoch_ns, x.step_ns, x.last_step, x.frags, x.shard_down, x.shard_incarnation,
    x.capacity, x.paused_until_ns, x.accounted_ns, x.factor, x.speed_rng, x.steps_done, x.chip_s,
    x.busy_ns, x.rejected, x.report_steps, x.report_chip_s, x.report_busy_ns);
}

template <class F>
void persist_fields(F& f, pending_delta& x) {
  f(x.values, x.tokens, x.steps, x.base_version, x.send_step, x.send_steps, x.deadline_ns,
    x.arrived_ns, x.bytes);
}

template <class F>
void persist_fields(F& f, owned_fragment& x) {
  f(x.id, x.global, x.momentum, x.down_residual, x.version, x.history, x.pending, x.last_send,
    x.merge_log, x.learner_version, x.finals, x.round, x.armed, x.flushed, x.dp_grads, x.has_copy,
    x.copy_version, x.copy, x.merges_since_recovery, x.recovered, x.recovered_version,
    x.momentum_restored);
}

template <class F>
void persist_fields(F& f, shard_state& x) {
  std::vector<uint32_t> live;
  if constexpr (!F::loading) {
    for (const auto& [learner, handle] : x.live) live.push_back(learner);
  }
  f(x.incarnation, x.out, x.alive, x.owned, x.slot_of, live, x.last_send_step, x.counters,
    x.latency_ns_ema, x.flushed_reported, x.recovering, x.held_deltas, x.held_pulls,
    x.held_dropped);
  if constexpr (F::loading) {
    x.live.clear();
    for (uint32_t l : live) {
      if (l >= x.dir->learners.size())
        throw persist_error{"live learner " + std::to_string(l) + " does not exist"};
      x.live.emplace(l, x.dir->learners[l]);
    }
    for (int slot : x.slot_of) {
      if (slot >= static_cast<int>(x.owned.size()))
        throw persist_error{"fragment slot out of range"};
    }
    const size_t n = largest_fragment(*x.env);
    x.decoded = float_buffer(n);
    x.merged = float_buffer(n);
    x.update = float_buffer(n);
    x.spare.clear();
  }
}

template <class F>
void persist_fields(F& f, scheduler_state& x) {
  f(x.offsets, x.epoch_ns, x.out, x.rejected);
}

template <class F>
void persist_fields(F& f, metrics_state& x) {
  std::vector<uint32_t> learners;
  if constexpr (!F::loading) {
    for (const auto& [id, handle] : x.learners) learners.push_back(id);
  }
  auto& r = x.report;
  f(learners, r.tokens, r.steps, r.end_time_ns, r.stop_time_ns, r.chip_s, r.trace, r.learner_bytes,
    r.shards_flushed, r.stopped, x.out);
  if constexpr (F::loading) {
    x.learners.clear();
    for (uint32_t l : learners) {
      if (l >= x.dir->learners.size())
        throw persist_error{"learner " + std::to_string(l) + " does not exist"};
      x.learners.emplace(l, x.dir->learners[l]);
    }
  }
}

template <class F>
void persist_fields(F& f, chaos_learner& x) {
  f(x.member, x.ran, x.incarnation, x.down, x.paused_until_ns, x.failed_units, x.capacity,
    x.failures);
}

template <class F>
void persist_fields(F& f, chaos_state& x) {
  auto& r = x.report;
  f(x.learners, x.shard_incarnation, x.stopped, r.kills, r.restarts, r.interruptions, r.rescales,
    r.uptime_s, r.observed_s, r.computing_chip_s, r.provisioned_chip_s, r.shard_restarts, r.trace,
    x.start_ns, x.accounted_ns, x.out);
}

template <class F>
void persist_fields(F& f, coordinator_state& x) {
  // The report's counters are this process's (a resumed run counts its own snapshots).
  f(x.next, x.tick_seq, x.start_ns, x.next_periodic_ns, x.next_at, x.stopped, x.out);
}

namespace {

template <class State>
std::vector<uint8_t> save_any(State& st) {
  return save_bytes(st);
}

template <class State>
status load_any(State& st, byte_view bytes, const std::string& what) {
  const uint32_t index = st.out.self_index;
  if (auto s = load_bytes(bytes, what, st); !s.ok()) return s;
  if (st.out.self_index != index) {
    return status(errc::corrupt_data, what + ": the state of actor " +
                                          std::to_string(st.out.self_index) + ", not of actor " +
                                          std::to_string(index));
  }
  return ok_status();
}

std::string fmt_count(double v) {
  char b[32];
  if (v >= 1e6) {
    std::snprintf(b, sizeof(b), "%.2fM", v / 1e6);
  } else if (v >= 1e3) {
    std::snprintf(b, sizeof(b), "%.1fk", v / 1e3);
  } else {
    std::snprintf(b, sizeof(b), "%.0f", v);
  }
  return b;
}

const char* phase_name(learner_state::phase p) {
  switch (p) {
    case learner_state::phase::absent:
      return "absent";
    case learner_state::phase::joining:
      return "joining";
    case learner_state::phase::pulling:
      return "pulling";
    case learner_state::phase::running:
      return "running";
    case learner_state::phase::waiting:
      return "waiting";
    case learner_state::phase::stopped:
      return "stopped";
    case learner_state::phase::down:
      return "down";
  }
  return "?";
}

}  // namespace

#define DILOCO_STATE_IO_IMPL(type)                                        \
  std::vector<uint8_t> save_state(type& st) {                             \
    return save_any(st);                                                  \
  }                                                                       \
  status load_state(type& st, byte_view bytes, const std::string& what) { \
    return load_any(st, bytes, what);                                     \
  }

DILOCO_STATE_IO_IMPL(learner_state)
DILOCO_STATE_IO_IMPL(dp_learner_state)
DILOCO_STATE_IO_IMPL(cost_learner_state)
DILOCO_STATE_IO_IMPL(shard_state)
DILOCO_STATE_IO_IMPL(scheduler_state)
DILOCO_STATE_IO_IMPL(metrics_state)
DILOCO_STATE_IO_IMPL(chaos_state)
DILOCO_STATE_IO_IMPL(coordinator_state)

#undef DILOCO_STATE_IO_IMPL

std::string state_summary(const learner_state& st) {
  std::string s = std::string(phase_name(st.now)) + ", process " + std::to_string(st.incarnation);
  if (st.trainer) {
    s += ", step " + std::to_string(st.trainer->steps_done()) + ", " +
         fmt_count(static_cast<double>(st.trainer->tokens_done())) + " tokens, versions";
    for (const auto& fs : st.frags) s += " " + std::to_string(fs.version);
  }
  return s;
}

std::string state_summary(const dp_learner_state& st) {
  if (!st.alive) return "down, process " + std::to_string(st.incarnation);
  return std::string(st.stopped   ? "stopped"
                     : st.waiting ? "waiting"
                                  : "computing") +
         ", process " + std::to_string(st.incarnation) + ", step " + std::to_string(st.step);
}

std::string state_summary(const cost_learner_state& st) {
  std::string s = "process " + std::to_string(st.incarnation) + ", " + fmt_count(st.steps_done) +
                  " steps, versions";
  for (const auto& f : st.frags) s += " " + std::to_string(f.version);
  return s;
}

std::string state_summary(const shard_state& st) {
  if (!st.alive) return "down, process " + std::to_string(st.incarnation);
  std::string s = std::string(st.recovering ? "recovering" : "serving") + ", process " +
                  std::to_string(st.incarnation) + ", " + std::to_string(st.live.size()) +
                  " live learners, versions";
  for (const auto& of : st.owned)
    s += " " + std::to_string(of.id) + ":" + std::to_string(of.version);
  return s;
}

std::string state_summary(const scheduler_state& st) {
  return std::to_string(st.offsets.size()) + " fragments scheduled";
}

std::string state_summary(const metrics_state& st) {
  return fmt_count(static_cast<double>(st.report.tokens)) + " tokens, " +
         std::to_string(st.report.steps) + " steps" + (st.report.stopped ? ", stopped" : "");
}

std::string state_summary(const chaos_state& st) {
  uint32_t up = 0;
  for (const auto& l : st.learners) up += l.member && !l.down ? 1 : 0;
  return std::to_string(up) + " learners up, " + std::to_string(st.report.kills) + " kills, " +
         std::to_string(st.report.interruptions) + " interruptions";
}

std::string state_summary(const coordinator_state& st) {
  return "next snapshot " + std::to_string(st.next);
}

namespace {

template <class State>
status check_state(const std::shared_ptr<const actor_env>& env, const directory_ptr& dir,
                   uint32_t index, byte_view bytes, const std::string& what) {
  State st;
  st.env = env;
  st.dir = dir;
  st.out.self_index = index;
  if constexpr (std::is_same_v<State, learner_state> || std::is_same_v<State, dp_learner_state> ||
                std::is_same_v<State, cost_learner_state>) {
    st.id = index;
  }
  return load_state(st, bytes, what);
}

}  // namespace

status check_part(const std::shared_ptr<const actor_env>& env, uint32_t index, byte_view part,
                  const std::string& what) {
  auto contents = decode_part(part, what);
  if (!contents) return contents.error();
  auto dir = std::make_shared<cluster_directory>();
  dir->learners.resize(env->ids.learners);
  dir->shards.resize(env->ids.shards);
  const byte_view state(contents->state.data(), contents->state.size());
  const run_config& c = env->config;
  switch (role_of(env->ids, index)) {
    case actor_role::learner:
      if (c.compute == compute_mode::cost)
        return check_state<cost_learner_state>(env, dir, index, state, what);
      if (c.mode == run_mode::data_parallel)
        return check_state<dp_learner_state>(env, dir, index, state, what);
      return check_state<learner_state>(env, dir, index, state, what);
    case actor_role::shard:
      return check_state<shard_state>(env, dir, index, state, what);
    case actor_role::scheduler:
      return check_state<scheduler_state>(env, dir, index, state, what);
    case actor_role::metrics:
      return check_state<metrics_state>(env, dir, index, state, what);
    case actor_role::chaos:
      return check_state<chaos_state>(env, dir, index, state, what);
    case actor_role::coordinator:
      return check_state<coordinator_state>(env, dir, index, state, what);
  }
  return status(errc::corrupt_data, what + ": no actor has index " + std::to_string(index));
}

}  // namespace diloco
