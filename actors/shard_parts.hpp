// The pieces the files of the syncer shard role share (actors/syncer.cpp: the merge path and
// the behavior; actors/shard_recovery.cpp: a restarted process rebuilding its fragments).
// Internal to actors/.
#pragma once

#include <string>

#include "actors/syncer.hpp"

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
// An outer gradient taken for merging: after its service time when merging has a modelled
// cost, or held through a recovery.
void take_outer_gradient(self_ptr self, outer_gradient_msg& msg);

// actors/shard_recovery.cpp
void on_copy(self_ptr self, copy_msg& msg);
void finish_recovery(self_ptr self);
uint64_t seed_from_snapshot(self_ptr self, const tensor_blob& blob);
void announce_restart(self_ptr self);

}  // namespace diloco::shard
