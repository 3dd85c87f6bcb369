// The syncer shard after its process was restarted: it collects the copies of its fragments
// that the learners hold (and, deployed, its part of the newest snapshot), adopts the newest
// of each once the recovery window is over, and serves the messages it held meanwhile.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "actors/shard_parts.hpp"
#include "actors/state_io.hpp"
#include "base/check.hpp"
#include "runtime/snapshot.hpp"
#include "tensor/codec.hpp"

namespace diloco::shard {

void on_copy(self_ptr self, copy_msg& msg) {
  auto& st = self->state;
  DILOCO_CHECK(st.alive(), "syncer: only a live process takes a learner's copy");
  owned_fragment* of = find_owned(self, msg.fragment);
  if (of == nullptr)
    return reject(self, "copy of fragment " + std::to_string(msg.fragment) + " (not owned here)");
  const bool cost = cfg(self).compute == compute_mode::cost;
  if (!cost) {
    // Validate now: a bad copy must not become the global value.
    const status s =
        decode_checked(msg.value, fspan(st.decoded.data(), frag_of(self, of->id).size));
    if (!s.ok())
      return reject(self, "copy of fragment " + std::to_string(of->id) + ": " + s.to_string());
  }
  if (st.recovering()) {
    if (!of->has_copy || msg.version > of->copy_version) {
      of->has_copy = true;
      of->copy_version = msg.version;
      of->copy = msg.value;
    }
    return;
  }
  // A learner that was slow to answer holds a newer version, and nothing merged since the
  // recovery: take it rather than let that learner see the version go back.
  if (msg.version > of->version && of->merges_since_recovery == 0) {
    spdlog::info("syncer {}: fragment {} recovered again at version {} (was {})", st.index, of->id,
                 msg.version, of->version);
    if (!cost) {
      const status taken = decode(msg.value.view(), of->global.all());
      DILOCO_CHECK(taken.ok(), "syncer: a copy validated on arrival decodes");
    }
    // Replies count the kept updates back from the version: none is kept yet to miscount.
    DILOCO_CHECK(of->history.empty(), "syncer: a fragment recovered again has no update kept");
    of->version = msg.version;
    of->recovered_version = msg.version;
  }
}

// The recovery window is over: adopt the newest copy of each fragment and serve.
void finish_recovery(self_ptr self) {
  auto& st = self->state;
  if (!st.recovering()) return;
  DILOCO_CHECK(st.alive(), "syncer: only a live process recovers");
  DILOCO_CHECK(std::all_of(st.owned.begin(), st.owned.end(),
                           [](const owned_fragment& of) { return of.pending.empty(); }),
               "syncer: nothing is merged before the recovery is over");
  st.phase = shard_phase::serving;
  const bool cost = cfg(self).compute == compute_mode::cost;
  for (auto& of : st.owned) {
    if (of.has_copy) {
      if (!cost) {
        // Validated on arrival (or encoded here from a snapshot's finite values).
        const status taken = decode(of.copy.view(), of.global.all());
        DILOCO_CHECK(taken.ok(), "syncer: a copy kept for the recovery decodes");
      }
      of.version = of.copy_version;
    } else {
      spdlog::warn("syncer {}: no learner had fragment {}: it restarts from the initial value",
                   st.index, of.id);
    }
    of.copy = tensor_blob();
    // The outer momentum was only in the dead process, unless a snapshot kept it.
    if (!of.momentum_restored) of.momentum.fill(0.0f);
    of.momentum_restored = false;
    of.round_share = 0.0;  // a round begins
    if (!cost) of.round_delta.fill(0.0f);
    of.expected_weight.clear();
    of.down_residual.fill(0.0f);
    of.history.clear();  // replies send whole fragments until new versions exist
    of.shares_merged = 0.0;
    of.share_marks.clear();
    of.merges_since_recovery = 0;
    of.recovered = true;
    of.recovered_version = of.version;
  }
  spdlog::info("syncer {}: recovered, serving {} held deltas", st.index, st.held_deltas.size());
  serve_held(self);
}

void serve_held(self_ptr self) {
  auto& st = self->state;
  auto deltas = std::move(st.held_deltas);
  auto pulls = std::move(st.held_pulls);
  st.held_deltas.clear();
  st.held_pulls.clear();
  // Each was received (and traced) when it arrived: now only handled.
  for (auto& d : deltas) take_outer_gradient(self, d);
  for (auto& p : pulls) {
    owned_fragment* of = find_owned(self, p.fragment);
    auto it = st.live.find(p.learner);
    if (of != nullptr && it != st.live.end()) send_full(self, *of, it->second, p.learner, 0);
  }
}

// A deployed shard restarted from its part of the newest snapshot: the snapshot's global value
// and version of each fragment become one more copy to recover from (the newest wins), and its
// outer momentum is kept through the recovery. Nothing keyed on the learners' send steps is
// taken (duplicate filter, merge log, resume steps): a learner that restarted since, or every
// learner of a resumed run, counts its steps anew, and its sends would be dropped as repeats.
// Nor are the pending deltas and the live set: the learners rejoin, and what was pending went
// down with the process.
// Returns the snapshot's number (0: the part did not load; the recovery uses copies only).
uint64_t seed_from_snapshot(self_ptr self, const tensor_blob& blob) {
  auto& st = self->state;
  const std::string what = "syncer " + std::to_string(st.index) + "'s snapshot part";
  auto part = decode_part(blob.view(), what);
  shard_state snap;
  snap.env = st.env;
  snap.index = st.index;
  snap.dir = st.dir;
  snap.out.init(*st.env, st.env->ids.shard_slot(st.index));
  status s = part ? load_state(snap, part->state, what) : part.error();
  if (!s.ok()) {
    spdlog::warn("{}: the recovery uses the learners' copies only", s.to_string());
    return 0;
  }
  std::vector<uint8_t> bytes;
  DILOCO_CHECK(st.recovering(), "syncer: a snapshot seeds only a recovery");
  for (auto& from : snap.owned) {
    owned_fragment* of = find_owned(self, from.id);
    if (of == nullptr || from.global.size() != of->global.size() ||
        from.momentum.size() != of->momentum.size())
      continue;
    if (auto e = encode(codec_config::make(codec_kind::fp32),
                        cfspan(from.global.data(), from.global.size()), fspan(), bytes);
        !e.ok()) {
      spdlog::warn("syncer {}: fragment {} of the snapshot is not finite ({}): not used", st.index,
                   from.id, e.to_string());
      continue;
    }
    of->has_copy = true;
    of->copy_version = from.version;
    of->copy = tensor_blob(bytes);
    of->momentum = std::move(from.momentum);
    of->momentum_restored = true;
    DILOCO_CHECK(of->momentum.size() == of->global.size(),
                 "syncer: a restored momentum is as large as its fragment");
  }
  st.counters.snapshot = part->snapshot;
  return part->snapshot;
}

// A deployed shard whose process was restarted tells every learner slot it is back; the
// learners rejoin and send their copies (in simulation the supervisor tells them).
void announce_restart(self_ptr self) {
  auto& st = self->state;
  std::string from;
  if (st.counters.snapshot != 0) {
    std::string versions;
    for (const auto& of : st.owned)
      versions += (versions.empty() ? "" : ", ") + std::to_string(of.copy_version);
    from =
        "snapshot " + std::to_string(st.counters.snapshot) + " (versions [" + versions + "]) and ";
  }
  DILOCO_CHECK(st.alive() && st.recovering(),
               "syncer: a restart is announced by a recovering process");
  spdlog::info("syncer {}: process {} started, recovering from {}the learners' copies", st.index,
               st.incarnation, from);
  for (uint32_t l = 0; l < st.dir->learners.size(); ++l) {
    post(self, direct(st.env->ids.learner(l), st.dir->learners[l]),
         peer_msg{st.out.make_stamp(now_ns(self)), st.index, st.incarnation});
  }
  for (uint32_t r = 0; r < st.dir->regionals.size(); ++r) {
    post(self, direct(st.env->ids.regional(r), st.dir->regionals[r]),
         peer_msg{st.out.make_stamp(now_ns(self)), st.index, st.incarnation});
  }
}
}  // namespace diloco::shard
