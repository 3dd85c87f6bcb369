// The metrics role: collects the learners' progress reports, ends the run when the token
// budget is spent (it sends every learner and the supervisor a stop), and records when every
// shard has had its final merge. Issue 7 extends it with the live endpoint and alerts.
#pragma once

#include <map>
#include <memory>

#include "protocol/interfaces.hpp"
#include "runtime/directory.hpp"
#include "runtime/env.hpp"
#include "runtime/transport.hpp"

namespace diloco {

struct metrics_state {
  std::shared_ptr<const actor_env> env;
  directory_ptr dir;
  std::map<uint32_t, learner_actor> learners;  // every learner slot that joined
  run_report report;
  outbox out;

  static inline const char* name = "metrics";
};

metrics_actor::behavior_type metrics(metrics_actor::stateful_pointer<metrics_state> self,
                                     std::shared_ptr<const actor_env> env, directory_ptr dir);

}  // namespace diloco
