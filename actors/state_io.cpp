#include "actors/state_io.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

#include "actors/chaos.hpp"
#include "actors/coordinator.hpp"
#include "actors/cost_learner.hpp"
#include "actors/dp_learner.hpp"
#include "actors/learner.hpp"
#include "actors/metrics.hpp"
#include "actors/reducer.hpp"
#include "actors/scheduler.hpp"
#include "actors/syncer.hpp"
#include "protocol/persist.hpp"
#include "protocol/wire.hpp"
#include "runtime/snapshot.hpp"

namespace diloco {

// Field lists (protocol/persist.hpp) of what the roles stand on; each role's own state has its
// list beside its struct (actors/*.hpp), with the loading fix-ups (after_load) here.

template <class F>
void persist_fields(F& f, outbox& x) {
  std::vector<std::pair<timer_key, wire_message>> timers;
  std::vector<int64_t> link_free_ns, last_arrival_ns;  // as vectors by destination
  if constexpr (!F::loading) {
    for (const auto& [k, m] : x.timers) timers.emplace_back(k, wire_message{m});
    link_free_ns = x.link_free_ns.dense();
    last_arrival_ns = x.last_arrival_ns.dense();
  }
  f(x.self_index, x.clock, x.link_rng, link_free_ns, last_arrival_ns, x.bytes_sent, x.messages_sent,
    x.bytes_received, x.lost[0], x.lost[1], x.lost_deltas[0], x.lost_deltas[1], x.duplicated,
    x.faults_off, x.reported_sent, x.reported_received, x.trace, timers, x.timer_seq);
  if constexpr (F::loading) {
    x.link_free_ns.assign(link_free_ns);
    x.last_arrival_ns.assign(last_arrival_ns);
    x.timers.clear();
    for (auto& [k, m] : timers) x.timers.emplace(k, std::move(m.msg));
  }
}

// A learner's computation that exists or not (a slot without a process has none), saved as
// the computation's own bytes (tensor/compute.hpp).
template <class F>
void optional_trainer(F& f, std::unique_ptr<learner_compute>& t, const actor_env& env, uint32_t id,
                      uint32_t incarnation) {
  bool has = t != nullptr;
  f(has);
  if (!has) {
    if constexpr (F::loading) t = nullptr;
    return;
  }
  std::vector<uint8_t> bytes;
  if constexpr (!F::loading) {
    if (auto s = t->save(bytes); !s.ok())
      throw persist_error{"learner " + std::to_string(id) + ": " + s.to_string()};
    f.owned(bytes);  // into a snapshot part's pieces as it is (protocol/persist.hpp)
    return;
  }
  if constexpr (F::loading) {
    // The computation's bytes where they are in the input (a snapshot part), not copied out
    // first; the same bytes on the wire as the byte vector saved.
    byte_view state;
    if (f.in_memory()) {
      bytes_in_place in_place;
      f(in_place);
      state = in_place.bytes;
    } else {
      f(bytes);
      state = byte_view(bytes.data(), bytes.size());
    }
    if (is_pytorch_state(state) && !env.model->is_pytorch()) {
      if (env.skip_pytorch_learners) {
        t = nullptr;  // inspect: the rest of the part is checked, this state is not
        ++env.pytorch_learners_skipped;
        return;
      }
      throw persist_error{"learner " + std::to_string(id) +
                          ": its state is a PyTorch learner's; load it with the Python package "
                          "and the run's learner (python3 -m diloco ... --learner "
                          "MODULE:FUNCTION)"};
    }
    const run_config& c = env.config;
    auto made = env.model->make(learner_spec{static_cast<int>(id), c.learner_capacity(), c.seed,
                                             incarnation, c.batch_of(id), env.ahead,
                                             /*restoring=*/true});
    if (!made)
      throw persist_error{"learner " + std::to_string(id) + ": " + made.error().to_string()};
    t = std::move(made).value();
    if (auto s = t->load(state); !s.ok())
      throw persist_error{"learner " + std::to_string(id) + ": " + s.to_string()};
  }
}

void after_load(learner_state& x) {
  if (!x.trainer) return;
  if (x.frags.size() != x.env->plan.fragments.size())
    throw persist_error{std::to_string(x.frags.size()) + " fragments saved, the run has " +
                        std::to_string(x.env->plan.fragments.size())};
  const size_t n = x.env->plan.largest();
  x.decoded = float_buffer(n);
}

void after_load(dp_learner_state& x) {
  if (!x.trainer) return;
  const size_t n = x.env->plan.largest();
  x.local = float_buffer(n);
  x.decoded = float_buffer(n);
}

namespace {
// A shard slot's live learners (saved as slot numbers) and its fragment slots, checked.
template <class State>
void load_live_and_slots(State& x, const std::vector<uint32_t>& live) {
  x.live.clear();
  for (uint32_t l : live) {
    if (l >= x.dir->learners.size() + x.dir->regionals.size())
      throw persist_error{"live learner " + std::to_string(l) + " does not exist"};
    x.live.emplace(l, x.dir->member(l));
  }
  for (int slot : x.slot_of) {
    if (slot >= static_cast<int>(x.owned.size())) throw persist_error{"fragment slot out of range"};
  }
}
}  // namespace

void after_load(shard_state& x, const std::vector<uint32_t>& live) {
  load_live_and_slots(x, live);
  x.slowest_valid = false;
  for (auto& of : x.owned) of.pending_sum.valid = false;
  const size_t n = x.env->plan.largest();
  x.decoded = float_buffer(n);
  x.merged = float_buffer(n);
  x.spare.clear();
}

void after_load(reducer_state& x, const std::vector<uint32_t>& live) {
  load_live_and_slots(x, live);
  size_t largest = 0;
  for (const auto& rf : x.owned) {
    if (rf.id >= x.env->plan.fragments.size()) throw persist_error{"fragment out of range"};
    const size_t n = x.env->plan.fragments[rf.id].size;
    largest = std::max(largest, n);
    for (const auto& [step, by_learner] : rf.grads) {
      for (const auto& [learner, g] : by_learner) {
        if (g.size() != n) throw persist_error{"a gradient of the wrong size"};
      }
    }
  }
  x.mean = float_buffer(largest);
  x.spare.clear();
}

void after_load(metrics_state& x, const std::vector<uint32_t>& learners) {
  x.learners.clear();
  for (uint32_t l : learners) {
    if (l >= x.dir->learners.size())
      throw persist_error{"learner " + std::to_string(l) + " does not exist"};
    x.learners.emplace(l, x.dir->learners[l]);
  }
}

namespace {

// Only a user's learner can fail to save (its code raised): the state is left empty, and the
// coordinator does not commit that snapshot (runtime/snapshot.hpp, unsaved_state_summary).
// `save` is save_bytes or save_pieces (the same bytes, in pieces for snapshot parts: no
// model-sized vector grown or copied twice).
template <class Out, class State, class Save>
Out save_or_empty(State& st, Save save) {
  try {
    return save(st);
  } catch (const persist_error& e) {
    spdlog::error("snapshot: the state of actor {} was not saved: {}", st.out.self_index, e.what);
    return {};
  }
}
template <class State>
std::vector<uint8_t> save_any(State& st) {
  return save_or_empty<std::vector<uint8_t>>(st, [](State& x) { return save_bytes(x); });
}
template <class State>
std::vector<tensor_blob> save_any_pieces(State& st) {
  return save_or_empty<std::vector<tensor_blob>>(st, [](State& x) { return save_pieces(x); });
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
  std::vector<tensor_blob> save_state_pieces(type& st) {                  \
    return save_any_pieces(st);                                           \
  }                                                                       \
  status load_state(type& st, byte_view bytes, const std::string& what) { \
    return load_any(st, bytes, what);                                     \
  }

DILOCO_STATE_IO_IMPL(learner_state)
DILOCO_STATE_IO_IMPL(dp_learner_state)
DILOCO_STATE_IO_IMPL(cost_learner_state)
DILOCO_STATE_IO_IMPL(shard_state)
DILOCO_STATE_IO_IMPL(reducer_state)
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
  if (!st.alive()) return "down, process " + std::to_string(st.incarnation);
  std::string s = std::string(st.recovering() ? "recovering" : "serving") + ", process " +
                  std::to_string(st.incarnation) + ", " + std::to_string(st.live.size()) +
                  " live learners, versions";
  for (const auto& of : st.owned)
    s += " " + std::to_string(of.id) + ":" + std::to_string(of.version);
  return s;
}

std::string state_summary(const reducer_state& st) {
  if (!st.alive) return "down, process " + std::to_string(st.incarnation);
  size_t steps = 0;
  for (const auto& rf : st.owned) steps += rf.grads.size();
  return "reducing, process " + std::to_string(st.incarnation) + ", " +
         std::to_string(st.live.size()) + " live learners, " + std::to_string(steps) +
         " steps in progress";
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

status check_role(const actor_env& env, uint32_t index, uint8_t role, const std::string& what) {
  const actor_role want = role_of(env.ids, index);
  if (role == static_cast<uint8_t>(want)) return ok_status();
  return status(errc::corrupt_data, what + ": actor " + std::to_string(index) + " has role " +
                                        std::to_string(role) + ", in this run it is the " +
                                        to_string(want) + " (" +
                                        std::to_string(static_cast<int>(want)) + ")");
}

status check_part(const std::shared_ptr<const actor_env>& env, uint32_t index, byte_view part,
                  const std::string& what) {
  // The state is thrown away: the models' numbers are skipped (their lengths are checked).
  const persist_check_scope checking;
  return load_part(env, index, part, what);
}

status load_part(const std::shared_ptr<const actor_env>& env, uint32_t index, byte_view part,
                 const std::string& what) {
  auto contents = decode_part(part, what);
  if (!contents) return contents.error();
  auto dir = std::make_shared<cluster_directory>();
  dir->learners.resize(env->ids.learners);
  dir->shards.resize(env->ids.shards);
  dir->regionals.resize(env->ids.regionals);
  const byte_view state = contents->state;
  const run_config& c = env->config;
  switch (role_of(env->ids, index)) {
    case actor_role::learner:
      if (c.compute == compute_mode::cost)
        return check_state<cost_learner_state>(env, dir, index, state, what);
      if (c.mode == run_mode::data_parallel)
        return check_state<dp_learner_state>(env, dir, index, state, what);
      return check_state<learner_state>(env, dir, index, state, what);
    case actor_role::shard:
      if (c.mode == run_mode::data_parallel)
        return check_state<reducer_state>(env, dir, index, state, what);
      return check_state<shard_state>(env, dir, index, state, what);
    case actor_role::scheduler:
      return check_state<scheduler_state>(env, dir, index, state, what);
    case actor_role::metrics:
      return check_state<metrics_state>(env, dir, index, state, what);
    case actor_role::chaos:
      return check_state<chaos_state>(env, dir, index, state, what);
    case actor_role::coordinator:
      return check_state<coordinator_state>(env, dir, index, state, what);
    case actor_role::regional:
      return check_state<shard_state>(env, dir, index, state, what);
  }
  return status(errc::corrupt_data, what + ": no actor has index " + std::to_string(index));
}

}  // namespace diloco
