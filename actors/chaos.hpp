// The chaos role, which also supervises the learners: it spawns them, injects the configured
// failures (a learner is killed and restarted after its down time; the restarted incarnation
// pulls the global model and rejoins) and reports what it did. Issue 4 adds the stochastic
// failure processes; the mechanism is this one.
#pragma once

#include <memory>
#include <vector>

#include "actors/env.hpp"
#include "actors/learner.hpp"
#include "actors/transport.hpp"
#include "protocol/interfaces.hpp"

namespace diloco {

struct chaos_state {
  std::shared_ptr<const actor_env> env;
  learner_peers peers;
  std::vector<learner_actor> learners;
  std::vector<uint32_t> incarnation;
  std::vector<bool> down;
  bool stopped = false;
  uint32_t kills = 0;
  uint32_t restarts = 0;
  outbox out;

  static inline const char* name = "chaos";
};

supervisor_actor::behavior_type chaos(supervisor_actor::stateful_pointer<chaos_state> self,
                                      std::shared_ptr<const actor_env> env, learner_peers peers);

}  // namespace diloco
