// The pieces the files of the syncer shard role share (actors/syncer.cpp: the merge path and
// the behavior; actors/shard_recovery.cpp: a restarted process rebuilding its fragments).
// Internal to actors/.
#pragma once

#include <string>

#include "actors/syncer.hpp"
#include "runtime/env.hpp"

namespace diloco::shard {

using self_ptr = shard_actor::stateful_pointer<shard_state>;

const run_config& cfg(self_ptr self);
const fragment& frag_of(self_ptr self, uint32_t p);
// The shard's entry for fragment p, or nullptr when another shard owns it.
owned_fragment* find_owned(self_ptr self, uint32_t p);
// Counts and logs a message the shard refuses (bad values, unknown sender or fragment).
void reject(self_ptr self, const std::string& what);
// Decodes into out; shape, checksum and finiteness are decode's checks.
status decode_checked(const tensor_blob& blob, fspan out);
// Sends learner `learner` the whole fragment at its current version.
void send_full(self_ptr self, owned_fragment& of, const learner_actor& to, uint32_t learner,
               uint64_t reply_to_step);
// Sends member `learner` the updates from version `from` to the fragment's current one (the
// whole fragment when they are no longer kept); uplink_ns: the answered send's time on the wire.
void send_reply(self_ptr self, owned_fragment& of, uint32_t learner, uint64_t from,
                uint64_t reply_to_step, int64_t uplink_ns = 0);
// A pending delta's outer gradients decoded and summed, in a buffer of the pool.
float_buffer decode_pending(shard_state& st, const pending_delta& pd, size_t n);
// The merge-twice invariant: every merged send logged, a repeat counted and logged.
void log_merged_sends(shard_state& st, owned_fragment& of, uint32_t learner,
                      const pending_delta& pd);
void release_pending(shard_state& st, owned_fragment& of);
// Deltas decoded for a merge, in buffers of the pool that go back however the merge ends.
struct pooled_deltas {
  shard_state& st;
  std::vector<float_buffer> values;
  ~pooled_deltas() {
    for (auto& v : values) st.spare.push_back(std::move(v));
  }
};
// A recovered shard slot takes the outer gradients and pulls it held while it recovered.
void serve_held(self_ptr self);
// Merges now, or arms the grace window; a final merge once every live learner's last is in.
void maybe_merge(self_ptr self, owned_fragment& of);
void check_flush(self_ptr self, owned_fragment& of);
// A merge of the fragment's pending deltas (final: the run's last).
void merge_now(self_ptr self, owned_fragment& of, bool final);

// actors/regional.cpp: the regional syncer, a shard slot past the run's shards. To its region's
// learners it is a syncer of every fragment; to the shards one member, whose merged delta
// crosses the wide-area link once per round and whose copies follow the shards' replies.
inline bool is_regional(const shard_state& st) {
  return st.index >= st.env->ids.shards;
}
bool in_region(const shard_state& st, uint32_t learner);
size_t regional_quorum(const shard_state& st);
bool upstream_down_for(const shard_state& st, uint32_t fragment);
// The live learners' slowest step time as they last reported it (0: none known), cached.
int64_t slowest_live_step(shard_state& st);
// A regional syncer sends a fragment's merged delta once per round: while its newest send is
// unanswered (and not overdue: an answer later than a learner waits for one is taken as lost),
// its learners' deltas gather for the next.
bool awaiting_answer(self_ptr self, const owned_fragment& of);
void regional_merge(self_ptr self, owned_fragment& of, bool final);
void regional_begin(self_ptr self, bool recovering);
// A recovering regional syncer's timer: it asks again for the fragments that have not come.
void regional_recovery_tick(self_ptr self);
void join_upstream(self_ptr self, bool rejoin);
// A learner of the region that sends without having joined (its join was lost in a partition)
// counts as joined: what it sends says it syncs here.
void adopt_learner(self_ptr self, uint32_t learner);
void leave_upstream(self_ptr self);
void on_upstream_update(self_ptr self, fragment_update_msg& msg);
void on_upstream_copy_request(self_ptr self, copy_request& msg);
void on_upstream_peer(self_ptr self, peer_msg& msg);
void on_upstream_closed(self_ptr self, closed_msg& msg);
// Adaptive inner steps: the schedule in force, from the fragment scheduler.
void on_regional_schedule(self_ptr self, const schedule_msg& msg);

// An outer gradient taken for merging: after its service time when merging has a modelled
// cost, or held through a recovery.
void take_outer_gradient(self_ptr self, outer_gradient_msg& msg);

// actors/shard_recovery.cpp
void on_copy(self_ptr self, copy_msg& msg);
void finish_recovery(self_ptr self);
uint64_t seed_from_snapshot(self_ptr self, const tensor_blob& blob);
void announce_restart(self_ptr self);

}  // namespace diloco::shard
