// The channels of the actor graph: which actor sends application messages to which. A
// snapshot's markers follow exactly these channels (runtime/snapshot.hpp), and `post` refuses
// (asserts) a send on a channel missing here, so the table and the code cannot drift apart.
//
//   learner     -> shards, fragment scheduler, metrics, regional syncers
//   shard       -> learners, metrics, regional syncers
//   scheduler   -> learners
//   metrics     -> learners, chaos, coordinator
//   chaos       -> learners, shards, regional syncers
//   coordinator -> (only markers, to everyone, as the initiator)
//   regional    -> learners, shards
#pragma once

#include <cstdint>
#include <vector>

#include "base/check.hpp"
#include "runtime/config.hpp"

namespace diloco {

enum class actor_role : uint8_t {
  learner,
  shard,
  scheduler,
  metrics,
  chaos,
  coordinator,
  regional
};

inline actor_role role_of(const actor_indices& ids, uint32_t index) {
  if (index < ids.learners) return actor_role::learner;
  if (index < ids.scheduler()) return actor_role::shard;
  if (index == ids.scheduler()) return actor_role::scheduler;
  if (index == ids.metrics()) return actor_role::metrics;
  if (index == ids.chaos()) return actor_role::chaos;
  if (index == ids.coordinator()) return actor_role::coordinator;
  return actor_role::regional;
}

inline const char* to_string(actor_role r) {
  switch (r) {
    case actor_role::learner:
      return "learner";
    case actor_role::shard:
      return "shard";
    case actor_role::scheduler:
      return "scheduler";
    case actor_role::metrics:
      return "metrics";
    case actor_role::chaos:
      return "chaos";
    case actor_role::coordinator:
      return "coordinator";
    case actor_role::regional:
      return "regional";
  }
  return "?";
}

inline bool channel_exists(const actor_indices& ids, uint32_t from, uint32_t to) {
  DILOCO_CHECK(from < ids.count() && to < ids.count(), "channels: both ends are actors of the run");
  const actor_role a = role_of(ids, from), b = role_of(ids, to);
  using r = actor_role;
  switch (a) {
    case r::learner:
      return b == r::shard || b == r::scheduler || b == r::metrics || b == r::regional;
    case r::shard:
      return b == r::learner || b == r::metrics || b == r::regional;
    case r::scheduler:
      return b == r::learner || (b == r::regional && ids.paced_regionals);
    case r::metrics:
      return b == r::learner || b == r::chaos || b == r::coordinator;
    case r::chaos:
      return b == r::learner || b == r::shard || b == r::regional;
    case r::coordinator:
      return false;
    case r::regional:
      return b == r::learner || b == r::shard || (b == r::scheduler && ids.paced_regionals);
  }
  return false;
}

inline std::vector<uint32_t> outgoing_channels(const actor_indices& ids, uint32_t from) {
  std::vector<uint32_t> to;
  for (uint32_t i = 0; i < ids.count(); ++i) {
    if (i != from && channel_exists(ids, from, i)) to.push_back(i);
  }
  return to;
}

inline std::vector<uint32_t> incoming_channels(const actor_indices& ids, uint32_t to) {
  std::vector<uint32_t> from;
  for (uint32_t i = 0; i < ids.count(); ++i) {
    if (i != to && channel_exists(ids, i, to)) from.push_back(i);
  }
  return from;
}

}  // namespace diloco
