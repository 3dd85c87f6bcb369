#include "actors/reducer.hpp"

#include <spdlog/spdlog.h>

#include <string>

#include "actors/slot.hpp"
#include "actors/state_io.hpp"
#include "base/check.hpp"
#include "runtime/snapshot.hpp"
#include "tensor/codec.hpp"
#include "tensor/merge.hpp"

namespace diloco {
namespace {

using self_ptr = shard_actor::stateful_pointer<reducer_state>;

void reject(self_ptr self, const std::string& what) {
  ++self->state.counters.rejected_messages;
  spdlog::warn("reducer {}: rejected {}", self->state.index, what);
}

reduce_fragment* find_owned(reducer_state& st, uint32_t p) {
  if (p >= st.slot_of.size() || st.slot_of[p] < 0) return nullptr;
  return &st.owned[static_cast<size_t>(st.slot_of[p])];
}

size_t size_of(const reducer_state& st, uint32_t p) {
  DILOCO_CHECK(p < st.env->plan.fragments.size(), "reducer: a fragment index in range");
  return st.env->plan.fragments[p].size;
}

// A process starts on the slot: the fragments it owns, no gradients yet.
void begin_process(self_ptr self, uint32_t incarnation) {
  auto& st = self->state;
  st.incarnation = incarnation;
  st.out.reseed_links(*st.env, incarnation);
  st.alive = true;
  st.owned.clear();
  st.live.clear();
  const actor_env& env = *st.env;
  st.slot_of.assign(env.plan.fragments.size(), -1);
  DILOCO_CHECK(st.index < env.fragments_of.size(), "reducer: a shard index in range");
  size_t largest = 0;
  for (uint32_t p : env.fragments_of[st.index]) {
    DILOCO_CHECK(p < st.slot_of.size(), "reducer: a fragment it owns is in the plan");
    st.slot_of[p] = static_cast<int>(st.owned.size());
    st.owned.push_back(reduce_fragment{p, {}});
    largest = std::max(largest, env.plan.fragments[p].size);
  }
  st.mean = float_buffer(largest);
}

// The host failed: every learner sees the connection close; the gradients it held are gone.
void end_process(self_ptr self) {
  auto& st = self->state;
  close_shard_links(self, *st.env, st.out, *st.dir, st.incarnation);
  st.alive = false;
  st.owned.clear();
  st.live.clear();
}

void on_join(self_ptr self, const join_msg& msg) {
  auto& st = self->state;
  if (msg.learner >= st.env->ids.learners || msg.st.sender != st.env->ids.learner(msg.learner))
    return reject(self, "join from unknown learner " + std::to_string(msg.learner));
  DILOCO_CHECK(msg.learner < st.dir->learners.size(), "reducer: a slot for every learner id");
  st.live[msg.learner] = st.dir->learners[msg.learner];
}

void on_gradient(self_ptr self, gradient_msg& msg) {
  auto& st = self->state;
  reduce_fragment* rf = find_owned(st, msg.fragment);
  if (rf == nullptr)
    return reject(self,
                  "gradient for fragment " + std::to_string(msg.fragment) + " (not owned here)");
  if (msg.learner >= st.env->ids.learners) return reject(self, "gradient from unknown learner");
  DILOCO_CHECK(rf->id == msg.fragment, "reducer: a fragment slot holds another fragment");
  float_buffer values = take_spare(st.spare, size_of(st, rf->id));
  // Shape, checksum and finiteness are decode's checks.
  if (auto s = decode(msg.grad.view(), values.all()); !s.ok()) {
    st.spare.push_back(std::move(values));
    return reject(self, "gradient of fragment " + std::to_string(rf->id) + ": " + s.to_string());
  }
  rf->grads[msg.step][msg.learner] = std::move(values);
}

// Once every live learner's gradient of a step is in, each of them gets the mean. Steps
// complete in order.
void reduce_ready_steps(self_ptr self, reduce_fragment& rf) {
  auto& st = self->state;
  const size_t n = size_of(st, rf.id);
  DILOCO_CHECK(st.mean.size() >= n, "reducer: the mean's buffer is smaller than a fragment");
  for (auto it = rf.grads.begin(); it != rf.grads.end();) {
    auto& by_learner = it->second;
    bool complete = !st.live.empty();
    for (const auto& [learner, h] : st.live) complete = complete && by_learner.count(learner) > 0;
    if (!complete) break;
    std::vector<merge_input> inputs;
    for (const auto& [learner, g] : by_learner) {
      if (st.live.count(learner) > 0) inputs.push_back({cfspan(g.data(), n), 1.0});
    }
    DILOCO_CHECK(!inputs.empty() && inputs.size() == st.live.size(),
                 "reducer: a complete step holds one gradient per live learner");
    fspan mean(st.mean.data(), n);
    const local_ranges all = {{0, n}};
    const status averaged = merge(merge_rule::plain_average,
                                  span<const merge_input>(inputs.data(), inputs.size()), all, mean);
    DILOCO_CHECK(averaged.ok(), "reducer: decoded gradients of one shape average");
    if (auto s = encode(codec_config::make(codec_kind::fp32), mean, fspan(), st.blob); !s.ok()) {
      // Finite gradients whose mean overflowed.
      ++st.counters.merges_refused;
      spdlog::error("reducer {}: reduction of fragment {} at step {} refused: {}", st.index, rf.id,
                    it->first, s.to_string());
      return;
    }
    const tensor_blob blob(st.blob);
    for (const auto& [learner, h] : st.live) {
      reduced_gradient_msg msg{st.out.make_stamp(now_ns(self)), rf.id, it->first,
                               static_cast<uint32_t>(inputs.size()), blob};
      post(self, over_link(st.env->ids.learner(learner), h, blob.size() + message_overhead_bytes),
           std::move(msg));
    }
    st.counters.merges += 1;
    st.counters.deltas_merged += inputs.size();
    for (auto& [learner, g] : by_learner) st.spare.push_back(std::move(g));
    it = rf.grads.erase(it);
  }
}

// A learner's process ended: the steps it held up may be complete without it.
void on_closed(self_ptr self, const closed_msg& msg) {
  auto& st = self->state;
  if (st.live.erase(msg.st.sender) == 0) return;
  for (auto& rf : st.owned) reduce_ready_steps(self, rf);
}

shard_report make_report(const reducer_state& st) {
  shard_report r = st.counters;
  r.bytes_sent = st.out.bytes_sent;
  r.bytes_received = st.out.bytes_received;
  r.incarnation = st.incarnation;
  for (const auto& rf : st.owned) r.pending_at_end += rf.grads.size();
  r.trace = st.out.trace;
  return r;
}

}  // namespace

shard_actor::behavior_type reducer(shard_actor::stateful_pointer<reducer_state> self,
                                   std::shared_ptr<const actor_env> env, uint32_t index,
                                   directory_ptr dir) {
  init_shard_slot(self->state, env, index, std::move(dir));
  auto dead = [self] { return !self->state.alive; };
  auto refuse = [self](const char* what) {
    reject(self, std::string(what) + " (a data-parallel run's shard slot only reduces gradients)");
  };
  return {
      [=](rewire_msg& m) { on_rewire(self->state, m); },
      [=](start_msg& msg) {
        if (msg.incarnation > 0) {
          // A deployed node's restarted process: the gradients of the steps in progress died
          // with the previous one, and the baseline's learners wait for them.
          started_now(self, msg);
          begin_process(self, msg.incarnation);
          spdlog::error(
              "reducer {}: restarted as process {}; the data-parallel baseline cannot "
              "recover the gradients of its steps in progress",
              self->state.index, msg.incarnation);
          return;
        }
        if (start_or_restore(self, msg)) return;
        begin_process(self, 0);
      },
      [=](marker_msg& m) { on_marker(self, m); },
      when_live(self, dead, [=](join_msg& msg) { on_join(self, msg); }),
      when_live(self, dead,
                [=](gradient_msg& msg) {
                  on_gradient(self, msg);
                  if (reduce_fragment* rf = find_owned(self->state, msg.fragment))
                    reduce_ready_steps(self, *rf);
                }),
      when_live(self, dead, [=](closed_msg& msg) { on_closed(self, msg); }),
      when_live(self, dead, [=](outer_gradient_msg&) { refuse("an outer gradient"); }),
      when_live(self, dead, [=](pull_msg&) { refuse("a pull"); }),
      when_live(self, dead, [=](copy_msg&) { refuse("a fragment copy"); }),
      // What a regional syncer takes (data parallel has none).
      when_live(self, dead, [=](fragment_update_msg&) { refuse("a fragment update"); }),
      when_live(self, dead, [=](copy_request&) { refuse("a copy request"); }),
      when_live(self, dead, [=](peer_msg&) { refuse("a peer's restart"); }),
      when_live(self, dead, [=](schedule_msg&) { refuse("a schedule"); }),
      // A reducer arms no timers.
      [](grace_tick) {},
      [](recovery_tick) {},
      [](service_tick) {},
      when_live(self, dead, [=](kill_msg&) { end_process(self); }),
      when_dormant(self, dead, [=](restart_msg& msg) { begin_process(self, msg.incarnation); }),
      [=](report_request) { return make_report(self->state); },
      // The model lives in the learners' replicas.
      [](global_request) { return global_snapshot{}; },
  };
}

}  // namespace diloco
