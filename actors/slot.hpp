// The edges of a process on a slot, for the roles whose processes come and go: a slot's wiring
// (a learner kind's, or a shard slot's: syncer or reducer), and the end of a process, when the
// peers on the other side see the connection close after everything it sent them (learners towards
// every shard slot, shard slots towards every learner slot).
#pragma once

#include <memory>

#include "runtime/directory.hpp"
#include "runtime/env.hpp"
#include "runtime/transport.hpp"

namespace diloco {

// The fields every learner kind's state starts with.
template <class State>
void init_learner_slot(State& st, std::shared_ptr<const actor_env> env, uint32_t id,
                       directory_ptr dir) {
  st.env = env;
  st.id = id;
  st.dir = std::move(dir);
  st.out.init(*env, env->ids.learner(id));
}

// The fields every shard slot's state (syncer or reducer) starts with.
template <class State>
void init_shard_slot(State& st, std::shared_ptr<const actor_env> env, uint32_t index,
                     directory_ptr dir) {
  st.env = env;
  st.index = index;
  st.dir = std::move(dir);
  st.counters.shard = index;
  st.out.init(*env, env->ids.shard_slot(index));
}

// A learner's process ends: every shard, and its regional syncer (`regional` >= 0).
template <class Self>
void close_learner_links(Self* self, const actor_env& env, outbox& out,
                         const cluster_directory& dir, uint32_t incarnation, int regional = -1) {
  for (uint32_t s = 0; s < dir.shards.size(); ++s) {
    post(self, env, out, direct(env.ids.shard(s), dir.shards[s]),
         closed_msg{out.make_stamp(now_ns(self)), incarnation});
  }
  if (regional >= 0) {
    const auto r = static_cast<uint32_t>(regional);
    post(self, env, out, direct(env.ids.regional(r), dir.regionals[r]),
         closed_msg{out.make_stamp(now_ns(self)), incarnation});
  }
}

// A shard slot's process ends: every learner slot, and the shard's other peers: a shard's
// regional syncers, a regional syncer's shards.
template <class Self>
void close_shard_links(Self* self, const actor_env& env, outbox& out, const cluster_directory& dir,
                       uint32_t incarnation) {
  for (uint32_t l = 0; l < dir.learners.size(); ++l) {
    post(self, env, out, direct(env.ids.learner(l), dir.learners[l]),
         closed_msg{out.make_stamp(now_ns(self)), incarnation});
  }
  if (env.ids.is_regional(out.self_index)) {
    for (uint32_t s = 0; s < dir.shards.size(); ++s) {
      post(self, env, out, direct(env.ids.shard(s), dir.shards[s]),
           closed_msg{out.make_stamp(now_ns(self)), incarnation});
    }
    return;
  }
  for (uint32_t r = 0; r < dir.regionals.size(); ++r) {
    post(self, env, out, direct(env.ids.regional(r), dir.regionals[r]),
         closed_msg{out.make_stamp(now_ns(self)), incarnation});
  }
}

}  // namespace diloco
