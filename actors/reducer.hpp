// The data-parallel baseline's all-reduce role, on the shard slots: for each fragment the slot
// owns, the learners' gradients of a step are averaged once every live learner's is in, and
// the mean goes back to all of them. It speaks the shard slot's protocol (shard_actor), so the
// cluster's wiring is the same in both modes; what belongs to Decoupled DiLoCo (outer
// gradients, pulls, copies) it refuses and counts.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "protocol/interfaces.hpp"
#include "runtime/directory.hpp"
#include "runtime/env.hpp"
#include "runtime/transport.hpp"

namespace diloco {

struct reduce_fragment {
  uint32_t id = 0;
  std::map<uint64_t, std::map<uint32_t, float_buffer>> grads;  // by step, then by learner
};

struct reducer_state {
  // The slot: kept across processes.
  std::shared_ptr<const actor_env> env;
  uint32_t index = 0;
  uint32_t incarnation = 0;
  directory_ptr dir;
  outbox out;
  shard_report counters;  // the slot's counts, over all its processes

  // The process.
  bool alive = false;
  std::vector<reduce_fragment> owned;
  std::vector<int> slot_of;                // fragment id -> index in owned, or -1
  std::map<uint32_t, learner_actor> live;  // joined and not down

  // Scratch.
  float_buffer mean;
  std::vector<float_buffer> spare;  // gradient buffers of finished steps, reused
  std::vector<uint8_t> blob;

  static inline const char* name = "reducer";
};

// What a snapshot keeps of this state (actors/state_io.cpp saves and loads it with
// protocol/persist.hpp), beside the struct so that a field added above is added here too. Not
// kept: the wiring (env, dir) and the scratch.
void after_load(reducer_state& x, const std::vector<uint32_t>& live);
template <class F>
void persist_fields(F& f, reduce_fragment& x) {
  f(x.id, x.grads);
}
template <class F>
void persist_fields(F& f, reducer_state& x) {
  std::vector<uint32_t> live;  // slot numbers; the handles come from the directory on loading
  if constexpr (!F::loading) {
    for (const auto& entry : x.live) live.push_back(entry.first);
  }
  f(x.incarnation, x.out, x.counters, x.alive, x.owned, x.slot_of, live);
  if constexpr (F::loading) after_load(x, live);
}

// Shard slot `index` of a data-parallel run.
shard_actor::behavior_type reducer(shard_actor::stateful_pointer<reducer_state> self,
                                   std::shared_ptr<const actor_env> env, uint32_t index,
                                   directory_ptr dir);

}  // namespace diloco
