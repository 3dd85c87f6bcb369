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

// What a snapshot keeps of this state (actors/state_io.cpp saves and loads it with
// protocol/persist.hpp): every field the actor computes with, beside the struct so that a
// field added above is added here too. Not kept: the wiring (env, dir), the snapshot agent,
// and scratch that every use overwrites.
// Loading: the learners' handles from the directory (actors/state_io.cpp).
void after_load(metrics_state& x, const std::vector<uint32_t>& learners);
template <class F>
void persist_fields(F& f, metrics_state& x) {
  // The learners as slot numbers (their handles come from the directory on loading).
  std::vector<uint32_t> learners;
  if constexpr (!F::loading) {
    for (const auto& entry : x.learners) learners.push_back(entry.first);
  }
  auto& r = x.report;
  f(learners, r.tokens, r.steps, r.end_time_ns, r.stop_time_ns, r.chip_s, r.trace, r.learner_bytes,
    r.shards_flushed, r.stopped, r.learner_tokens, r.learner_steps, x.out);
  if constexpr (F::loading) after_load(x, learners);
}

metrics_actor::behavior_type metrics(metrics_actor::stateful_pointer<metrics_state> self,
                                     std::shared_ptr<const actor_env> env, directory_ptr dir);

}  // namespace diloco
