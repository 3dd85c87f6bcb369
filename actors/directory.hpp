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

#include "protocol/interfaces.hpp"

namespace diloco {

struct cluster_directory {
  std::vector<learner_actor> learners;  // by learner slot
  std::vector<shard_actor> shards;      // by shard index
  scheduler_actor scheduler;
  metrics_actor metrics;
  supervisor_actor chaos;
  coordinator_actor coordinator;

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
      default:
        return caf::actor{};
    }
  }
};

using directory_ptr = std::shared_ptr<const cluster_directory>;

}  // namespace diloco
