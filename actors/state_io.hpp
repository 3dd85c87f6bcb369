// Every actor's state as bytes, for snapshots (runtime/snapshot.hpp): what the actor needs to
// continue exactly as it would have. The slot's wiring (environment, directory) is not saved:
// the restoring harness provides it. Scratch buffers are not saved, only sized again. Each
// role's field list (persist_fields) sits beside its state's struct in the role's header, so a
// field added to a state is added to its list in the same place (and the restore tests, which
// compare a restored run with the original bit for bit, catch one that is not).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/span.hpp"
#include "base/status.hpp"
#include "protocol/tensor_blob.hpp"

namespace diloco {

struct actor_env;
struct learner_state;
struct dp_learner_state;
struct cost_learner_state;
struct shard_state;
struct reducer_state;
struct scheduler_state;
struct metrics_state;
struct chaos_state;
struct coordinator_state;

#define DILOCO_STATE_IO(type)                                            \
  std::vector<uint8_t> save_state(type& st);                             \
  std::vector<tensor_blob> save_state_pieces(type& st);                  \
  status load_state(type& st, byte_view bytes, const std::string& what); \
  std::string state_summary(const type& st);

DILOCO_STATE_IO(learner_state)
DILOCO_STATE_IO(dp_learner_state)
DILOCO_STATE_IO(cost_learner_state)
DILOCO_STATE_IO(shard_state)
DILOCO_STATE_IO(reducer_state)
DILOCO_STATE_IO(scheduler_state)
DILOCO_STATE_IO(metrics_state)
DILOCO_STATE_IO(chaos_state)
DILOCO_STATE_IO(coordinator_state)

#undef DILOCO_STATE_IO

// Whether the role a snapshot's manifest gives actor `index` is its role in this run.
status check_role(const actor_env& env, uint32_t index, uint8_t role, const std::string& what);

// Whether actor `index`'s part of a snapshot loads into a fresh state of its role (the
// harness checks every part before it starts anything). Everything is checked but the models'
// numbers, which are skipped (protocol/persist.hpp, persist_check_scope): the actor loads
// them when it starts.
status check_part(const std::shared_ptr<const actor_env>& env, uint32_t index, byte_view part,
                  const std::string& what);
// The same load in full, the models' numbers too, into a fresh state that is then dropped:
// what each actor's own load does when it starts from the part (bench/bench_resume.cpp).
status load_part(const std::shared_ptr<const actor_env>& env, uint32_t index, byte_view part,
                 const std::string& what);

}  // namespace diloco
