// Who is where: the handle of every actor slot of a cluster, by role and index.
//
// The actor graph of a run is fixed: every learner slot (up to the membership's capacity),
// every syncer shard and every service actor exists for the whole run. A failure does not
// remove an actor; the slot's process dies (kill_msg), drops what reaches it, and a restart
// brings a fresh process into the same slot. So a handle never goes stale, every channel of
// the graph is known in advance (what a Chandy-Lamport snapshot needs), and a restored run
// rewires by index. The harness spawns every actor, fills the directory, then sends start_msg.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <memory>
#include <vector>

#include "base/check.hpp"
#include "protocol/interfaces.hpp"

namespace diloco {

struct cluster_directory {
  std::vector<learner_actor> learners;  // by learner slot
  std::vector<shard_actor> shards;      // by shard index
  scheduler_actor scheduler;
  metrics_actor metrics;
  supervisor_actor chaos;
  coordinator_actor coordinator;
  // Regional syncers (runtime/config.hpp, regions[].syncer): to their region's learners each is
  // a syncer shard of every fragment; to the shards, one member among the learners.
  std::vector<shard_actor> regionals;

  // Puts a handle (local, or a remote proxy) into slot `index` of a cluster with `learner_slots`
  // learner slots and `shard_count` shards (actor_indices numbering).
  void place(uint32_t index, const caf::actor& a, uint32_t learner_slots, uint32_t shard_count) {
    if (index < learner_slots) {
      if (learners.size() < learner_slots) learners.resize(learner_slots);
      learners[index] = caf::actor_cast<learner_actor>(a);
      return;
    }
    index -= learner_slots;
    if (index < shard_count) {
      if (shards.size() < shard_count) shards.resize(shard_count);
      shards[index] = caf::actor_cast<shard_actor>(a);
      return;
    }
    switch (index - shard_count) {
      case 0:
        scheduler = caf::actor_cast<scheduler_actor>(a);
        break;
      case 1:
        metrics = caf::actor_cast<metrics_actor>(a);
        break;
      case 2:
        chaos = caf::actor_cast<supervisor_actor>(a);
        break;
      case 3:
        coordinator = caf::actor_cast<coordinator_actor>(a);
        break;
      default: {
        const uint32_t r = index - shard_count - 4;
        DILOCO_CHECK(r < 4096, "directory: an index past the run's last actor");
        if (regionals.size() <= r) regionals.resize(r + 1);
        regionals[r] = caf::actor_cast<shard_actor>(a);
        break;
      }
    }
  }

  // Member m of the shards (actor_indices::member): learner slot m, or past the learner slots
  // a regional syncer, which takes what a shard sends a learner.
  learner_actor member(uint32_t m) const {
    if (m < learners.size()) return learners[m];
    DILOCO_CHECK(m - learners.size() < regionals.size(), "directory: a member of the run");
    return caf::actor_cast<learner_actor>(regionals[m - learners.size()]);
  }

  // The actor at `index` (actor_indices numbering).
  caf::actor at(uint32_t index) const {
    if (index < learners.size()) return caf::actor_cast<caf::actor>(learners[index]);
    index -= static_cast<uint32_t>(learners.size());
    if (index < shards.size()) return caf::actor_cast<caf::actor>(shards[index]);
    switch (index - shards.size()) {
      case 0:
        return caf::actor_cast<caf::actor>(scheduler);
      case 1:
        return caf::actor_cast<caf::actor>(metrics);
      case 2:
        return caf::actor_cast<caf::actor>(chaos);
      case 3:
        return caf::actor_cast<caf::actor>(coordinator);
      default: {
        const size_t r = index - shards.size() - 4;
        return r < regionals.size() ? caf::actor_cast<caf::actor>(regionals[r]) : caf::actor{};
      }
    }
  }
};

using directory_ptr = std::shared_ptr<const cluster_directory>;

// rewire_msg: the actor's own copy of its directory with one slot replaced. The old directory
// stays as it was for whoever else still holds it.
template <class State>
void on_rewire(State& st, const rewire_msg& m) {
  DILOCO_CHECK(m.index < st.env->ids.count(), "directory: a rewired slot is an actor of the run");
  auto copy = std::make_shared<cluster_directory>(*st.dir);
  copy->place(m.index, m.handle, st.env->ids.learners, st.env->ids.shards);
  st.dir = std::move(copy);
}

}  // namespace diloco
