#include "actors/scheduler.hpp"
#include "base/check.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

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

scheduler_actor::behavior_type fragment_scheduler(
    scheduler_actor::stateful_pointer<scheduler_state> self, std::shared_ptr<const actor_env> env,
    directory_ptr dir) {
  auto& init = self->state;
  init.env = env;
  init.dir = std::move(dir);
  const run_config& c = env->config;
  init.offsets = fragment_offsets(c.schedule, static_cast<uint32_t>(c.fragments),
                                  static_cast<uint32_t>(c.period_steps));
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
                 if (msg.learner >= st.env->ids.learners ||
                     msg.st.sender != st.env->ids.learner(msg.learner)) {
                   ++st.rejected;
                   spdlog::warn("fragment scheduler: rejected join from learner {}", msg.learner);
                   return;
                 }
                 DILOCO_CHECK(msg.learner < st.dir->learners.size(),
                              "fragment scheduler: a slot for every learner id");
                 const run_config& rc = st.env->config;
                 // A learner refuses a schedule without one offset per fragment.
                 DILOCO_CHECK(st.offsets.size() == static_cast<size_t>(rc.fragments),
                              "fragment scheduler: an offset per fragment");
                 schedule_msg reply{st.out.make_stamp(now_ns(self)),
                                    static_cast<uint32_t>(rc.period_steps),
                                    static_cast<uint32_t>(rc.overlap_steps),
                                    st.offsets,
                                    rc.clock == schedule_clock::global,
                                    st.epoch_ns,
                                    to_ns(rc.speed.step_time_s)};
                 post(self, direct(st.env->ids.learner(msg.learner), st.dir->learners[msg.learner]),
                      std::move(reply));
               }),
  };
}

}  // namespace diloco
