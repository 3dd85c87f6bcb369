#include "actors/chaos.hpp"

#include <spdlog/spdlog.h>

#include "actors/dp_learner.hpp"
#include "actors/metrics.hpp"

namespace diloco {

namespace {

using self_ptr = supervisor_actor::stateful_pointer<chaos_state>;

learner_actor spawn_learner(self_ptr self, uint32_t id, uint32_t incarnation) {
  auto& st = self->state;
  const bool dp = st.env->config.mode == run_mode::data_parallel;
  if (!st.env->virtual_time) {
    // In real time a learner computes without pause: its own thread keeps it on one core with
    // a warm cache, instead of being moved between the scheduler's workers.
    if (dp) return self->spawn<caf::detached>(dp_learner, st.env, id, incarnation, st.peers);
    return self->spawn<caf::detached>(learner, st.env, id, incarnation, st.peers);
  }
  if (dp) return self->spawn(dp_learner, st.env, id, incarnation, st.peers);
  return self->spawn(learner, st.env, id, incarnation, st.peers);
}

}  // namespace

supervisor_actor::behavior_type chaos(supervisor_actor::stateful_pointer<chaos_state> self,
                                      std::shared_ptr<const actor_env> env, learner_peers peers) {
  auto& init = self->state;
  init.env = env;
  init.peers = std::move(peers);
  init.out.self_index = env->ids.chaos();
  const auto M = static_cast<uint32_t>(env->config.learners);
  init.incarnation.assign(M, 0);
  init.down.assign(M, false);
  post(self, *env, init.out, env->ids.metrics(), init.peers.metrics, message_overhead_bytes, false,
       join_msg{init.out.make_stamp(now_ns(self)), supervisor_join_id, false});
  for (uint32_t i = 0; i < M; ++i) init.learners.push_back(spawn_learner(self, i, 0));
  const auto& failures = env->config.failures;
  for (uint32_t e = 0; e < failures.size(); ++e) {
    self->delayed_send(self, std::chrono::nanoseconds(to_ns(failures[e].at_s)),
                       fault_tick{e, false});
  }
  return {
      [=](fault_tick tick) {
        auto& st = self->state;
        const failure_event& f = st.env->config.failures.at(tick.event);
        if (st.stopped) return;
        if (!tick.restart) {
          if (st.down[f.learner]) return;
          spdlog::info("chaos: killing learner {} (incarnation {})", f.learner,
                       st.incarnation[f.learner]);
          self->send_exit(st.learners[f.learner], caf::exit_reason::kill);
          st.down[f.learner] = true;
          st.kills += 1;
          self->delayed_send(self, std::chrono::nanoseconds(to_ns(f.down_s)),
                             fault_tick{tick.event, true});
        } else {
          if (!st.down[f.learner]) return;
          st.incarnation[f.learner] += 1;
          spdlog::info("chaos: restarting learner {} (incarnation {})", f.learner,
                       st.incarnation[f.learner]);
          st.learners[f.learner] = spawn_learner(self, f.learner, st.incarnation[f.learner]);
          st.down[f.learner] = false;
          st.restarts += 1;
        }
      },
      [=](stop_msg& msg) {
        self->state.out.on_receive(msg.st, message_overhead_bytes);
        self->state.stopped = true;
      },
      [=](report_request) {
        auto& st = self->state;
        return supervisor_report{st.learners, st.kills, st.restarts};
      },
  };
}

}  // namespace diloco
