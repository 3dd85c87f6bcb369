// What the three learner roles (learner, data-parallel learner, cost-model learner) share:
// the speed model and announcing themselves to the rest of the cluster.
#pragma once

#include <cmath>

#include "actors/env.hpp"
#include "actors/learner.hpp"
#include "actors/transport.hpp"
#include "tensor/rng.hpp"

namespace diloco {

// One step-time multiplier: slowdown x a mean-one lognormal of the learner's jitter.
inline double draw_speed_factor(const speed_config& sp, rng& gen) {
  double factor = sp.slowdown;
  if (sp.jitter > 0) factor *= std::exp(sp.jitter * gen.normal() - 0.5 * sp.jitter * sp.jitter);
  return factor;
}

// A learner (re)joins: the metrics actor (for the stop), the fragment scheduler (for its
// schedule; not for data parallel) and every shard (which monitors it).
template <class Self>
void announce_join(Self* self, const actor_env& env, outbox& out, const learner_peers& peers,
                   uint32_t id, bool rejoin, bool with_scheduler) {
  join_msg join{out.make_stamp(now_ns(self)), id, rejoin};
  post(self, env, out, env.ids.metrics(), peers.metrics, message_overhead_bytes, false, join);
  if (with_scheduler) {
    join.st = out.make_stamp(now_ns(self));
    post(self, env, out, env.ids.scheduler(), peers.scheduler, message_overhead_bytes, false, join);
  }
  for (uint32_t s = 0; s < peers.shards.size(); ++s) {
    join.st = out.make_stamp(now_ns(self));
    post(self, env, out, env.ids.shard(s), peers.shards[s], message_overhead_bytes, true, join);
  }
}

}  // namespace diloco
