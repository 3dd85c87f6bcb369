// Chandy-Lamport snapshots, the actor side (docs/architecture.md, "Snapshots"). The coordinator
// starts snapshot n by sending every actor a marker. An actor that sees the marker of n for the
// first time records its state (actors/state_io.hpp, which includes its pending timers), sends
// markers on all its outgoing channels (runtime/channels.hpp), and from then records every
// message arriving on an incoming channel until that channel's marker arrives. With all
// markers in, it sends its part to the coordinator. Nothing pauses: the actor goes on with
// its work between the marker and the last channel's marker.
//
// Markers travel the same FIFO links as the channel's messages (everything sent before the
// marker arrives before it, everything after arrives after), and they change nothing an actor
// computes with: not the vector clocks, the link timing, the counters or the trace. So a run
// with snapshots is the run without them, bit for bit.
//
// Restoring (start_msg with the part): the actor loads its state and re-arms, at their
// original ticks, its pending timers and the recorded channel messages. Every actor's future
// then unfolds as in the original run, because in simulation the order of all events is a
// function of their ticks (runtime/transport.hpp).
#pragma once

#include <spdlog/spdlog.h>
#include <caf/mailbox_element.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "base/span.hpp"
#include "base/status.hpp"
#include "protocol/messages.hpp"
#include "runtime/channels.hpp"
#include "runtime/transport.hpp"

namespace diloco {

// The summary of a part whose actor could not save its state (a user's learner code raised,
// actors/state_io.cpp): the coordinator does not commit that snapshot.
inline constexpr const char* unsaved_state_summary = "(its state could not be saved)";

// An actor's part, decoded: the state is a view into the part's bytes (valid while they are).
struct snapshot_part_contents {
  uint64_t snapshot = 0;
  byte_view state;
  std::vector<recorded_message> channel;
};
result<snapshot_part_contents> decode_part(byte_view bytes, const std::string& what);

// Delivers msg from self to `to` at clock tick `tick` exactly (markers; restored timers and
// channel messages, which go to self).
template <class Self>
void schedule_to(Self* self, caf::strong_actor_ptr to, int64_t tick, caf::message msg) {
  schedule_delivery(self, std::move(to), tick,
                    caf::make_mailbox_element(caf::actor_cast<caf::strong_actor_ptr>(self),
                                              caf::make_message_id(), {}, std::move(msg)));
}
template <class Self>
void schedule_at(Self* self, int64_t tick, caf::message msg) {
  schedule_to(self, caf::actor_cast<caf::strong_actor_ptr>(self), tick, std::move(msg));
}

// A marker to actor `dest_index` along the link from this actor: after everything sent on it
// before, without touching the link's state (so the messages after it keep their timing).
template <class Self>
void post_marker(Self* self, outbox& out, uint32_t dest_index, const caf::actor& dest,
                 marker_msg m) {
  if (out.replaying()) return;
  if (out.scale == 1) {
    // After what this actor sent on the link before (FIFO channels: the snapshot's premise).
    send_real<true>(self, *self->state.env, out.self_index, dest_index, dest, m);
    return;
  }
  int64_t at = now_ns(self) + 1;
  at = std::max(at, out.last_arrival_ns.get(dest_index));
  schedule_to(self, caf::actor_cast<caf::strong_actor_ptr>(dest), out.tick_at(out.slot_up(at)),
              caf::make_message(m));
}

template <class Self>
void finish_part(Self* self) {
  auto& st = self->state;
  auto& a = st.out.snap;
  DILOCO_CHECK(a.recording && a.open.empty(), "snapshot: a part sent with channels still open");
  snapshot_part part;
  part.snapshot = a.epoch;
  part.index = st.out.self_index;
  part.cut_tick = a.cut_tick;
  part.summary = a.summary;
  part.payload = encode_part(a);
  a.recording = false;
  a.state = {};
  a.channel = {};
  // A deployed run: large pieces go to the coordinator's node on the bulk channel, as outer
  // gradients do (a model-sized part through CAF's own connection would hold it for seconds).
  send_real<true>(self, *st.env, st.out.self_index, st.env->ids.coordinator(), st.dir->coordinator,
                  std::move(part));
}

// Records this actor's state for snapshot `snapshot` (at most once per snapshot) and sends
// the markers on its outgoing channels.
template <class Self>
void record_state(Self* self, uint64_t snapshot) {
  auto& st = self->state;
  auto& out = st.out;
  auto& a = out.snap;
  if (snapshot <= a.epoch) return;
  if (out.replaying()) {  // replay asks for the state: hand it over, no snapshot
    out.tape->state(out.self_index, save_state(st), state_summary(st));
    return;
  }
  a = snapshot_agent{};
  a.epoch = snapshot;
  a.recording = true;
  // Simulation: the tick a restore restarts the clock at. Real time: the wall clock, for people
  // (a deployed run's resume delivers what was in flight at once, see restore_actor).
  a.cut_tick = st.out.scale == 1 ? observed_now_ns(self) : clock_ticks(self);
  a.state = save_state_pieces(st);
  a.summary = a.state.empty() ? unsaved_state_summary : state_summary(st);
  a.open = incoming_channels(st.env->ids, out.self_index);
  for (uint32_t to : outgoing_channels(st.env->ids, out.self_index))
    post_marker(self, out, to, st.dir->at(to), marker_msg{out.self_index, snapshot});
  if (a.open.empty()) finish_part(self);
}

template <class Self>
void on_marker(Self* self, const marker_msg& m) {
  auto& a = self->state.out.snap;
  record_state(self, m.snapshot);
  if (m.snapshot != a.epoch || !a.recording) return;
  a.open.erase(std::remove(a.open.begin(), a.open.end(), m.sender), a.open.end());
  if (a.open.empty()) finish_part(self);
}

// start_msg with a part: the state, then the timers and channel messages at their ticks. The
// harness checked the part before (check_part), so failing here is a bug: the actor stops.
template <class Self>
void restore_actor(Self* self, const tensor_blob& blob) {
  auto& st = self->state;
  const std::string what = "actor " + std::to_string(st.out.self_index) + "'s snapshot part";
  auto part = decode_part(blob.view(), what);
  status s = part ? load_state(st, part->state, what) : part.error();
  if (!s.ok()) {
    spdlog::critical("{}", s.to_string());
    self->quit(caf::sec::invalid_argument);
    return;
  }
  st.out.snap = snapshot_agent{};
  st.out.snap.epoch = part->snapshot;
  if (st.out.replaying()) return;  // the tape re-delivers what was pending
  if (st.out.scale == 1) {
    // Real time (a deployed run resumed, hosts/deploy.cpp): the recorded ticks are another
    // process's steady clock, maybe another host's; what was in flight arrives now, in order.
    for (auto& r : part->channel)
      caf::anon_send(caf::actor_cast<caf::actor>(self), std::move(r.msg));
    return;
  }
  for (const auto& [key, msg] : st.out.timers) schedule_at(self, key.first, msg);
  for (auto& r : part->channel) schedule_at(self, r.tick, std::move(r.msg));
}

// Every actor's start_msg: it has started (what arrived before goes back behind the start),
// and a snapshot part restores it. True when restored: the caller starts fresh otherwise.
template <class Self>
bool start_or_restore(Self* self, const start_msg& msg) {
  started_now(self, msg);
  if (msg.restore.empty()) return false;
  restore_actor(self, msg.restore);
  return true;
}

}  // namespace diloco
