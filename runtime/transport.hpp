// How actors send and keep time: stamp the message (vector clock tick, sender, send time),
// model the link in simulated time, count bytes. Actor code calls `post` and `set_timer`; it
// never calls CAF's send directly, so every message between roles is stamped, counted and (in
// simulation) delayed, faulted and ordered the same way.
//
// Simulated time has no ties. CAF's test clock fires timeouts due at the same time in the
// order they were inserted, an order a restored run cannot reproduce. So in simulation every
// delivery, message or timer, is due at tick = slot * env.tick_scale + tag(sender), with slot
// the natural time in slots (one nanosecond each up to 1,024 actors, ns_per_slot beyond),
// at least one slot in the future and strictly increasing per (sender, receiver). tag is a
// seeded permutation of actor indices (the seed picks the order of same-time events). Then each
// clock event wakes one actor, and the order of all events is a pure function of (config, seed),
// from a fresh start or from a snapshot.
#pragma once

#include <caf/delegated.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/message.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/check.hpp"
#include "protocol/digest.hpp"
#include "protocol/messages.hpp"
#include "runtime/channels.hpp"
#include "runtime/env.hpp"
#include "runtime/per_dest.hpp"
#include "runtime/shared_clock.hpp"
#include "runtime/tape.hpp"
#include "runtime/timeline.hpp"
#include "tensor/rng.hpp"

namespace diloco {

// Why a message never arrived (counted at the sending link).
enum class loss_reason : uint8_t { network = 0, partition = 1 };
constexpr int loss_reasons = 2;

// A message recorded on an incoming channel during a snapshot, with the tick it arrived at.
struct recorded_message {
  uint32_t sender = 0;
  int64_t tick = 0;
  caf::message msg;
};

// A timer set and not yet fired: due tick, sequence (same-tick timers fire in this order).
using timer_key = std::pair<int64_t, uint64_t>;

// One actor's side of a Chandy-Lamport snapshot (runtime/snapshot.hpp). Not part of the
// actor's state: a restored actor starts with nothing recorded.
struct snapshot_agent {
  uint64_t epoch = 0;  // newest snapshot whose marker reached this actor
  bool recording = false;
  std::vector<uint32_t> open;      // incoming channels (sender indices) still without the marker
  int64_t cut_tick = 0;            // when the state was recorded
  std::vector<tensor_blob> state;  // the state at the cut, in pieces (actors/state_io.hpp)
  std::string summary;
  std::vector<std::pair<timer_key, caf::message>> timers;  // pending at the cut
  std::vector<recorded_message> channel;  // arrived after the cut, before the markers

  bool is_open(uint32_t sender) const {
    return std::find(open.begin(), open.end(), sender) != open.end();
  }
};
// The agent's part as bytes (runtime/snapshot.cpp), in pieces: the state's pieces are shared,
// not copied, between the agent and the part.
std::vector<tensor_blob> encode_part(const snapshot_agent& agent);
// Pieces joined into one vector (small parts: a tape's checkpoints).
std::vector<uint8_t> join_pieces(const std::vector<tensor_blob>& pieces);

// The sending side of an actor: its identity, clock and tag, its outgoing links (simulated
// FIFO pipes, one per destination actor index), fault decisions and counters.
struct outbox {
  uint32_t self_index = 0;
  int64_t scale = 1;    // ticks per time slot (actor_env::tick_scale)
  int64_t slot_ns = 1;  // natural nanoseconds per slot (ns_per_slot)
  int64_t tag = 0;      // this sender's slot within a nanosecond (simulation)
  vector_clock clock;
  rng link_rng;                                  // drop and duplication decisions
  per_dest<int64_t> link_free_ns{0};             // when the pipe to each is next idle
  per_dest<int64_t> last_arrival_ns{INT64_MIN};  // the last arrival on each: keeps it FIFO
  uint64_t bytes_sent = 0;
  uint64_t messages_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t lost[loss_reasons] = {0, 0};         // messages lost, by reason
  uint64_t lost_deltas[loss_reasons] = {0, 0};  // of which outer gradients
  uint64_t duplicated = 0;
  bool faults_off = false;     // the run is stopping: its end goes over reliable links
  uint64_t reported_sent = 0;  // bytes already reported to the metrics actor
  uint64_t reported_received = 0;
  uint64_t trace = 0;  // everything received and every timer fired, in order
  // Timers set and not yet fired (simulation): they are part of the state in a snapshot.
  std::map<timer_key, caf::message> timers;
  uint64_t timer_seq = 0;
  // Not state: while recording a tape, when each pending timer was set (ns), by its content's
  // digest, so that the tape can say how long it ran (the exported trace's spans: an inner
  // step, a grace window).
  std::multimap<uint64_t, int64_t> timer_set_ns;
  bool traced = true;                // not state: whether receipts enter `trace` (env.traced)
  snapshot_agent snap;               // not state: see snapshot_agent
  tape_hook* tape = nullptr;         // not state: the run's recorder or replay checker (env.tape)
  sim_timeline* timeline = nullptr;  // not state: a simulated run's deliveries (env.timeline)
  // Not state either: whether start_msg has arrived, and what came before it (a deployed run's
  // other nodes may start first). In simulation every actor starts before any message flows.
  bool started = false;
  std::vector<caf::message> before_start;

  bool replaying() const { return tape != nullptr && tape->replaying(); }

  // Who sends, in which time base, and the seed of this sender's link faults (distinct per
  // incarnation).
  void init(const actor_env& env, uint32_t index, uint32_t incarnation = 0) {
    DILOCO_CHECK(index < env.ids.count() && env.tick_scale >= 1,
                 "transport: an actor of the run, on a clock of whole ticks");
    self_index = index;
    tape = env.tape.get();
    timeline = env.timeline.get();
    traced = env.traced;
    const uint64_t seed =
        env.config.interleave_seed != 0 ? env.config.interleave_seed : env.config.seed;
    link_rng.reseed(derive_seed(env.config.seed, "link", (uint64_t{index} << 32) | incarnation));
    scale = env.tick_scale;
    slot_ns = ns_per_slot(scale);
    if (scale > 1) {
      // x -> (a x + b) mod 1024 with a odd is a permutation: each seed orders actors its way.
      const uint64_t a = derive_seed(seed, "tags.a", 0) | 1u, b = derive_seed(seed, "tags.b", 0);
      tag = static_cast<int64_t>((a * index + b) % static_cast<uint64_t>(scale));
    }
  }

  // Each process on the slot has its own link faults.
  void reseed_links(const actor_env& env, uint32_t incarnation) {
    link_rng.reseed(
        derive_seed(env.config.seed, "link", (uint64_t{self_index} << 32) | incarnation));
  }

  // Tick and stamp for a send at time now_ns.
  stamp make_stamp(int64_t now_ns) {
    clock.event(self_index);
    return stamp{self_index, clock, now_ns};
  }

  // Receipt of a message with content digest `content` (actors/digest.hpp): merge the
  // sender's clock, tick, and fold the message into the trace.
  void on_receive(const stamp& st, uint64_t bytes, uint64_t content) {
    clock.merge(st.clock);
    clock.event(self_index);
    bytes_received += bytes;
    if (traced) trace = mix(mix(mix(trace, st.sender), digest_of(st.clock)), content);
  }

  // A timer this actor set fired.
  void on_timer(uint64_t content) {
    if (traced) trace = mix(trace, content);
  }

  // Byte counts since the previous call, for a progress report.
  std::pair<uint64_t, uint64_t> take_byte_counts() {
    const auto d = std::make_pair(bytes_sent - reported_sent, bytes_received - reported_received);
    reported_sent = bytes_sent;
    reported_received = bytes_received;
    return d;
  }

  // Delivery delay of `bytes` to `dest` over a simulated link, queueing behind earlier sends.
  int64_t link_delay_ns(const link_config& link, uint32_t dest, int64_t now_ns, uint64_t bytes) {
    DILOCO_CHECK(link.bandwidth_gbps > 0, "transport: a link without bandwidth passed validation");
    int64_t& free_ns = link_free_ns.at(dest);
    const int64_t start = std::max(now_ns, free_ns);
    const auto transmit =
        static_cast<int64_t>(static_cast<double>(bytes) * 8.0 / (link.bandwidth_gbps));
    free_ns = start + transmit;
    return (start - now_ns) + transmit + to_ns(link.latency_s);
  }

  // The natural time `ns`, rounded up to a whole slot.
  int64_t slot_up(int64_t ns) const {
    if (slot_ns == 1) return ns;
    return (ns >= 0 ? (ns + slot_ns - 1) / slot_ns : ns / slot_ns) * slot_ns;
  }
  // This sender's tick in the slot that begins at natural time `ns` (a slot boundary).
  int64_t tick_at(int64_t ns) const { return ns / slot_ns * scale + tag; }

  // The tick at which something sent to `dest` now, arriving after `delay_ns`, is delivered.
  int64_t arrival_tick(uint32_t dest, int64_t now_ns, int64_t delay_ns) {
    int64_t& last = last_arrival_ns.at(dest);
    const int64_t arrival = slot_up(std::max(now_ns + std::max<int64_t>(delay_ns, 1), last + 1));
    last = arrival;
    return tick_at(arrival);
  }
};

// The actor's clock in ticks (CAF's nanoseconds), and in natural nanoseconds.
template <class Self>
int64_t clock_ticks(Self* self) {
  const sim_timeline* line = self->state.out.timeline;
  const caf::actor_clock::time_point now =
      line != nullptr && line->clock_now != nullptr ? *line->clock_now : self->clock().now();
  return now.time_since_epoch() / std::chrono::nanoseconds(1);
}

// Ticks to natural nanoseconds (the start of the tick's slot). A simulation's scale is a power
// of two (actor_env::make), and a shift then gives the quotient of a non-negative tick in a
// cycle, where a 64-bit division takes tens: an actor reads the time several times per event.
inline int64_t ticks_to_ns(int64_t ticks, int64_t scale) {
  const int64_t slot = ns_per_slot(scale);
  if (ticks >= 0 && (scale & (scale - 1)) == 0)
    return (ticks >> __builtin_ctzll(static_cast<uint64_t>(scale))) * slot;
  return ticks / scale * slot;
}

// A value from outside the run that an actor's computation depends on (real time only: in
// simulation everything is a function of the virtual clock). With a tape it is recorded, and a
// replay gets the recorded value back instead of reading it again (runtime/tape.hpp), so a
// real-time actor re-executes exactly.
template <class Self, class Live>
int64_t taped_read(Self* self, tape_read what, Live live) {
  auto& out = self->state.out;
  if (out.tape == nullptr) return live();
  if (out.tape->replaying()) return out.tape->replay_read(out.self_index, what);
  const int64_t value = live();
  out.tape->read(out.self_index, what, value);
  return value;
}

// The run's time. Real time (scale 1): the shared clock (runtime/shared_clock.hpp), taped.
// Simulation: virtual nanoseconds.
template <class Self>
int64_t now_ns(Self* self) {
  if (self->state.out.scale == 1) return taped_read(self, tape_read::clock, shared_clock_ns);
  return ticks_to_ns(clock_ticks(self), self->state.out.scale);
}
// The same time for what only observes the run (logs, the live monitor, a snapshot's cut):
// never taped, so that observing with or without an observer replays alike.
template <class Self>
int64_t observed_now_ns(Self* self) {
  if (self->state.out.scale == 1) return shared_clock_ns();
  return ticks_to_ns(clock_ticks(self), self->state.out.scale);
}

// Wire size of a message: its tensor payload plus a fixed allowance for fields and stamp.
constexpr uint64_t message_overhead_bytes = 64;

// The data plane: the messages lossy links may drop or duplicate (control messages, joins
// and pulls, are carried reliably, as by a TCP connection that stays up).
template <class Msg>
constexpr bool data_plane_v =
    std::is_same_v<Msg, outer_gradient_msg> || std::is_same_v<Msg, fragment_update_msg> ||
    std::is_same_v<Msg, gradient_msg> || std::is_same_v<Msg, reduced_gradient_msg>;

// Whether a partition cuts the link between a learner and the shards at time t.
inline bool partitioned(const run_config& c, uint32_t learner, int64_t t_ns) {
  for (const auto& p : c.partitions) {
    if (t_ns < to_ns(p.at_s) || t_ns >= to_ns(p.at_s + p.heal_s)) continue;
    for (uint32_t l : p.learners) {
      if (l == learner) return true;
    }
  }
  return false;
}

// The tensor payloads of a message (deployed runs carry them on the bulk channel).
template <class Msg>
constexpr bool has_blobs_v =
    std::is_same_v<Msg, outer_gradient_msg> || std::is_same_v<Msg, fragment_update_msg> ||
    std::is_same_v<Msg, gradient_msg> || std::is_same_v<Msg, reduced_gradient_msg> ||
    std::is_same_v<Msg, copy_msg> || std::is_same_v<Msg, snapshot_part>;
template <class Msg, class F>
void for_each_blob(Msg& m, F&& f) {
  if constexpr (std::is_same_v<Msg, outer_gradient_msg>) {
    f(m.delta);
  } else if constexpr (std::is_same_v<Msg, fragment_update_msg>) {
    for (auto& b : m.blobs) f(b);
  } else if constexpr (std::is_same_v<Msg, gradient_msg> ||
                       std::is_same_v<Msg, reduced_gradient_msg>) {
    f(m.grad);
  } else if constexpr (std::is_same_v<Msg, copy_msg>) {
    f(m.value);
  } else if constexpr (std::is_same_v<Msg, snapshot_part>) {
    for (auto& b : m.payload) f(b);
  }
}

// Sends msg from self (actor index `from`) to `dest` (index `dest_index`) in real time. In a
// deployed run (env.offload) the message keeps its place behind what self sent to `dest`
// before, and travels once its large payloads are at the destination's node (runtime/env.hpp,
// blob_offload). `Anonymous`: without self as the sender (a marker, a snapshot part).
template <bool Anonymous = false, class Self, class Dest, class Msg>
void send_real(Self* self, const actor_env& env, uint32_t from, uint32_t dest_index,
               const Dest& dest, Msg&& msg) {
  using msg_type = std::decay_t<Msg>;
  if (env.offload) {
    auto held = std::make_shared<msg_type>(std::forward<Msg>(msg));
    std::vector<tensor_blob*> blobs;
    if constexpr (has_blobs_v<msg_type>)
      for_each_blob(*held, [&](tensor_blob& b) { blobs.push_back(&b); });
    caf::strong_actor_ptr to = caf::actor_cast<caf::strong_actor_ptr>(dest);
    caf::strong_actor_ptr sender;
    if constexpr (!Anonymous) sender = caf::strong_actor_ptr(self->ctrl());
    auto later = [held, to, sender] {
      if (to)
        to->enqueue(sender, caf::make_message_id(), caf::make_message(std::move(*held)), nullptr);
    };
    if (env.offload->defer(from, dest_index, blobs, std::move(later))) return;
    if constexpr (Anonymous) {
      caf::anon_send(dest, std::move(*held));
    } else {
      self->send(dest, std::move(*held));
    }
    return;
  }
  if constexpr (Anonymous) {
    caf::anon_send(dest, std::forward<Msg>(msg));
  } else {
    self->send(dest, std::forward<Msg>(msg));
  }
}

// A send, for the tape (recorded, or checked against the recording).
template <class Self, class Msg>
void tape_sent(Self* self, uint32_t dest_index, const Msg& msg) {
  auto& out = self->state.out;
  if (out.tape != nullptr)
    out.tape->sent(out.self_index, dest_index, clock_ticks(self), wire_tag_of<Msg>(),
                   message_digest(msg), msg.st);
}

// An input, for the tape (recording only: in replay the driver knows them). The content is
// stored without its stamp, which the tape keeps apart.
template <class Msg, class = void>
struct has_stamp : std::false_type {};
template <class Msg>
struct has_stamp<Msg, std::void_t<decltype(std::declval<Msg&>().st)>> : std::true_type {};

template <class Self, class Msg>
void tape_input(Self* self, tape_kind kind, const Msg& msg, const stamp* st) {
  auto& out = self->state.out;
  if (out.tape == nullptr || out.tape->replaying()) return;
  caf::message content;
  if constexpr (has_stamp<Msg>::value) {
    Msg copy = msg;
    copy.st = stamp{};
    content = caf::make_message(std::move(copy));
  } else {
    content = caf::make_message(msg);
  }
  // A rotating recording's checkpoint: the actor's state before this input, as a snapshot part
  // (its timers are in its state; no channel is recorded).
  const checkpoint_source checkpoint = [self] {
    snapshot_agent part;
    part.epoch = self->state.out.snap.epoch;
    std::vector<uint8_t> state = save_state(self->state);
    if (state.empty()) return std::vector<uint8_t>{};
    part.state.emplace_back(std::move(state));
    return join_pieces(encode_part(part));
  };
  out.tape->input(out.self_index, kind, clock_ticks(self), wire_tag_of<Msg>(), content,
                  message_digest(msg), st, checkpoint);
}

// Delivers `msg` (a mailbox element) to `to` at clock tick `tick`, or at once if that is past
// (a restored run's channel): through the simulated run's timeline, or CAF's clock when there
// is none (a run driven by hand).
template <class Self>
void schedule_delivery(Self* self, caf::strong_actor_ptr to, int64_t tick,
                       caf::mailbox_element_ptr msg) {
  DILOCO_CHECK(to != nullptr && msg != nullptr,
               "transport: a delivery has a receiver and a message");
  if (sim_timeline* line = self->state.out.timeline) {
    line->push(tick, std::move(to), std::move(msg));
    return;
  }
  self->clock().schedule_message(caf::actor_clock::time_point{std::chrono::nanoseconds(tick)},
                                 std::move(to), std::move(msg));
}

// Delivers msg to dest at `tick` (simulation).
template <class Self, class Dest, class Msg>
void deliver_at(Self* self, const Dest& dest, int64_t tick, Msg&& msg) {
  if (self->state.out.replaying()) return;  // the tape delivers, not the actors
  if (!dest) return;
  schedule_delivery(
      self, caf::actor_cast<caf::strong_actor_ptr>(dest), tick,
      caf::make_mailbox_element(self->ctrl(), caf::make_message_id(), {}, std::forward<Msg>(msg)));
}

// Where a message goes and what it costs: the receiver's actor index (env.ids) and handle, the
// bytes it costs on the wire, and whether it crosses a simulated link (a learner's link to a
// shard: latency, bandwidth, partitions and lossy-link faults) or goes directly (one
// nanosecond later, FIFO, never lost). Made by over_link or direct.
template <class Dest>
struct destination {
  uint32_t index;
  const Dest& handle;
  uint64_t bytes;
  bool linked;
};

template <class Dest>
destination<Dest> over_link(uint32_t index, const Dest& handle,
                            uint64_t bytes = message_overhead_bytes) {
  return destination<Dest>{index, handle, bytes, true};
}

template <class Dest>
destination<Dest> direct(uint32_t index, const Dest& handle) {
  return destination<Dest>{index, handle, message_overhead_bytes, false};
}

// Sends msg from self to `to`: through its simulated link when it has one and the env runs in
// virtual time, directly otherwise.
template <class Self, class Dest, class Msg>
void post(Self* self, const actor_env& env, outbox& out, const destination<Dest>& to, Msg&& msg) {
  using msg_type = std::decay_t<Msg>;
  const uint32_t dest_index = to.index;
  const Dest& dest = to.handle;
  const uint64_t bytes = to.bytes;
  const bool linked = to.linked;
  DILOCO_CHECK(channel_exists(env.ids, out.self_index, dest_index),
               "transport: a send on a channel runtime/channels.hpp lacks");
  out.bytes_sent += bytes;
  out.messages_sent += 1;
  tape_sent(self, dest_index, msg);
  if (!env.virtual_time) {
    if (out.replaying()) return;  // the tape delivers, not the actors
    send_real(self, env, out.self_index, dest_index, dest, std::forward<Msg>(msg));
    return;
  }
  const int64_t now = now_ns(self);
  if (!linked) {
    deliver_at(self, dest, out.arrival_tick(dest_index, now, 1), std::forward<Msg>(msg));
    return;
  }
  auto lose = [&](loss_reason why) {
    out.lost[static_cast<int>(why)] += 1;
    if constexpr (std::is_same_v<msg_type, outer_gradient_msg>)
      out.lost_deltas[static_cast<int>(why)] += 1;
  };
  // Simulated faults: partitions cut a learner's links; lossy links drop or repeat data.
  const uint32_t learner = out.self_index < env.ids.learners ? out.self_index : dest_index;
  if (!out.faults_off && !env.config.partitions.empty() && learner < env.ids.learners &&
      partitioned(env.config, learner, now)) {
    lose(loss_reason::partition);
    return;
  }
  int copies = 1;
  if constexpr (data_plane_v<msg_type>) {
    const auto& link = env.config.link;
    if (!out.faults_off && (link.drop_rate > 0 || link.dup_rate > 0)) {
      const double u = out.link_rng.uniform();
      if (u < link.drop_rate) {
        lose(loss_reason::network);
        return;
      }
      if (u < link.drop_rate + link.dup_rate) {
        copies = 2;
        out.duplicated += 1;
      }
    }
  }
  // A learner's links have its region's latency and bandwidth (run_config::link_of).
  const link_config& base =
      learner < env.learner_links.size() ? env.learner_links[learner] : env.config.link;
  // Scripted changes (link_changes) hold for what is sent while they last.
  link_config link =
      env.config.link_changes.empty() ? base : env.config.link_at(learner, base, now);
  if (env.ids.regionals > 0) {
    // A regional syncer's links: its region's own network to its learners, the region's
    // wide-area link to the shards.
    const bool from_regional = env.ids.is_regional(out.self_index);
    if (from_regional || env.ids.is_regional(dest_index)) {
      const uint32_t r = (from_regional ? out.self_index : dest_index) - env.ids.regional(0);
      const uint32_t other = from_regional ? dest_index : out.self_index;
      DILOCO_CHECK(r < env.regional_local.size(), "transport: a regional syncer of the run");
      link = other < env.ids.learners
                 ? env.regional_local[r]
                 : env.config.link_in_region_at(env.regional_wan[r], env.regional_names[r], now);
    }
  }
  uint64_t wire_bytes = bytes;
  if constexpr (data_plane_v<msg_type>) {
    if (env.payload_scale != 1.0)
      wire_bytes = static_cast<uint64_t>(static_cast<double>(bytes) * env.payload_scale);
  }
  const int64_t delay = out.link_delay_ns(link, dest_index, now, wire_bytes);
  DILOCO_CHECK(delay >= 0, "transport: a link delivers no sooner than its send");
  if (copies == 2) deliver_at(self, dest, out.arrival_tick(dest_index, now, delay), msg);
  deliver_at(self, dest, out.arrival_tick(dest_index, now, delay), std::forward<Msg>(msg));
}

// The same from an actor whose state holds its environment (`env`) and outbox (`out`).
template <class Self, class Dest, class Msg>
void post(Self* self, const destination<Dest>& to, Msg&& msg) {
  post(self, *self->state.env, self->state.out, to, std::forward<Msg>(msg));
}

// A message about the run rather than of it (a snapshot request, the stop to the snapshot
// coordinator): FIFO on its link like the others, but it ticks no clock and counts no bytes,
// so the run is the same with or without it.
template <class Self, class Dest, class Msg>
void post_control(Self* self, outbox& out, uint32_t dest_index, const Dest& dest, Msg&& msg) {
  tape_sent(self, dest_index, msg);
  if (out.scale == 1) {
    if (out.replaying()) return;
    send_real(self, *self->state.env, out.self_index, dest_index, dest, std::forward<Msg>(msg));
    return;
  }
  deliver_at(self, dest, out.arrival_tick(dest_index, now_ns(self), 1), std::forward<Msg>(msg));
}

// A timer: msg comes back to self after `delay_ns` (at least a tick in simulation, at once in
// real time when the delay is 0).
template <class Self, class Msg>
void set_timer(Self* self, outbox& out, int64_t delay_ns, Msg&& msg) {
  DILOCO_CHECK(delay_ns >= 0, "transport: a timer set in the past");
  // The clock as the tape's ticks read it (in real time, now_ns would be a taped read of its
  // own, which a replay would not repeat).
  if (out.tape != nullptr && !out.replaying())
    out.timer_set_ns.emplace(message_digest(msg),
                             ticks_to_ns(clock_ticks(self), std::max<int64_t>(1, out.scale)));
  if (out.scale == 1) {
    if (out.replaying()) return;  // the tape says when it fired
    if (delay_ns > 0) {
      self->delayed_send(self, std::chrono::nanoseconds(delay_ns), std::forward<Msg>(msg));
    } else {
      self->send(self, std::forward<Msg>(msg));
    }
    return;
  }
  // Timers skip the FIFO rule of links: a short timer set after a long one fires first.
  const int64_t tick = out.tick_at(out.slot_up(now_ns(self) + std::max<int64_t>(delay_ns, 1)));
  // One message for both: the pending timer (snapshot state) and its delivery.
  caf::message m = caf::make_message(std::forward<Msg>(msg));
  out.timers.emplace(timer_key{tick, ++out.timer_seq}, m);
  if (out.replaying()) return;  // the tape delivers, not the actors
  schedule_delivery(
      self, self->ctrl(), tick,
      caf::make_mailbox_element(self->ctrl(), caf::make_message_id(), {}, std::move(m)));
}

// A timer fired: it leaves the set of pending timers (simulation: the earliest due, which is
// this one) and enters the trace.
template <class Self, class Msg>
void timer_fired(Self* self, const Msg& tick) {
  auto& out = self->state.out;
  const uint64_t digest = message_digest(tick);
  if (out.tape != nullptr && !out.replaying()) {
    // The tape keeps when the timer was set as its send time (sender: the actor itself); a
    // timer set before a resume is not known (-1).
    stamp set{out.self_index, {}, -1};
    if (auto it = out.timer_set_ns.find(digest); it != out.timer_set_ns.end()) {
      set.sent_at_ns = it->second;
      out.timer_set_ns.erase(it);
    }
    tape_input(self, tape_kind::timer, tick, &set);
  }
  if (out.scale > 1 && !out.timers.empty()) {
    const int64_t due = out.timers.begin()->first.first;
    if (due != clock_ticks(self) && out.tape != nullptr) {
      out.tape->timer_mismatch(out.self_index, due, clock_ticks(self));
    }
    DILOCO_CHECK(due == clock_ticks(self) || out.replaying(),
                 "transport: a timer fired at another tick than it was due");
    out.timers.erase(out.timers.begin());
  }
  out.on_timer(digest);
}

// A message arrived: clocks, counters and trace (outbox::on_receive), and a copy for the
// snapshot being recorded when its channel is still open.
template <class Self, class Msg>
void capture(Self* self, const Msg& msg) {
  auto& snap = self->state.out.snap;
  if (snap.recording && snap.is_open(msg.st.sender))
    snap.channel.push_back(
        recorded_message{msg.st.sender, clock_ticks(self), caf::make_message(msg)});
}
template <class Self, class Msg>
void on_received(Self* self, const Msg& msg, uint64_t bytes) {
  tape_input(self, tape_kind::message, msg, &msg.st);
  auto& out = self->state.out;
  out.on_receive(msg.st, bytes, out.traced ? message_digest(msg) : 0);
  capture(self, msg);
}
// A message reached a slot without a process (lost as on a dead host), or a sender it does
// not accept. A snapshot still records it: what reaches the slot after the restore must be
// the same.
template <class Self, class Msg>
void on_dropped(Self* self, const Msg& msg) {
  auto& out = self->state.out;
  if (!out.started) {  // not dead: not started yet; it is handled once the actor starts
    out.before_start.push_back(caf::make_message(msg));
    return;
  }
  tape_input(self, tape_kind::dropped, msg, &msg.st);
  capture(self, msg);
}

// The bytes a received message counts for: its tensor payload and the modelled per-message
// overhead. A role whose messages count otherwise overloads received_bytes for its state.
inline uint64_t wire_bytes(const outer_gradient_msg& m) {
  return m.delta.size() + message_overhead_bytes;
}
inline uint64_t wire_bytes(const gradient_msg& m) {
  return m.grad.size() + message_overhead_bytes;
}
inline uint64_t wire_bytes(const reduced_gradient_msg& m) {
  return m.grad.size() + message_overhead_bytes;
}
inline uint64_t wire_bytes(const copy_msg& m) {
  return m.value.size() + message_overhead_bytes;
}
inline uint64_t wire_bytes(const fragment_update_msg& m) {
  uint64_t bytes = message_overhead_bytes;
  for (const auto& b : m.blobs) bytes += b.size();
  return bytes;
}
template <class Msg>
uint64_t wire_bytes(const Msg&) {
  return message_overhead_bytes;
}
template <class State, class Msg>
uint64_t received_bytes(const State&, const Msg& msg) {
  return wire_bytes(msg);
}

// The message type of a one-argument handler (a lambda taking `Msg&`).
template <class F>
struct handler_message : handler_message<decltype(&F::operator())> {};
template <class C, class R, class A>
struct handler_message<R (C::*)(A) const> {
  using type = std::remove_cv_t<std::remove_reference_t<A>>;
};

// The wrappers the roles put around their message handlers, so that a handler sees its
// message and nothing else: the receipt (tape, vector clock, byte count, trace digest,
// snapshot channel: on_received) comes first, before the handler can read a clock or send.

// What a handler of a one-way message (every message between roles, every timer) returns.
// For a handler returning void, CAF makes a response promise at every message only to find
// that nobody waits for an answer; `delegated` says that no answer comes from here, and CAF
// skips it (a few percent of the cost-model loop's instructions). Not for a message asked
// for with `request` (the asker would wait for ever): the reports keep their result types.
using one_way = caf::delegated<void>;

// A handler of a role without processes that come and go.
template <class Self, class F>
auto received(Self* self, F f) {
  using msg_t = typename handler_message<F>::type;
  return [self, f](msg_t& msg) {
    on_received(self, msg, received_bytes(self->state, msg));
    if constexpr (std::is_void_v<decltype(f(msg))>) {
      f(msg);
      return one_way{};
    } else {
      return f(msg);
    }
  };
}

// A handler that only a live process on the slot takes: while `dormant()` holds (no process
// runs there) the message is dropped as on a dead host (on_dropped), otherwise it is received
// and `f` gets it. Every role with processes that come and go wraps its handlers in this (or
// in when_dormant), so the check is written once.
template <class Self, class Dormant, class F>
auto when_live(Self* self, Dormant dormant, F f) {
  using msg_t = typename handler_message<F>::type;
  return [self, dormant, f](msg_t& msg) -> one_way {
    if (dormant()) {
      on_dropped(self, msg);
      return {};
    }
    on_received(self, msg, received_bytes(self->state, msg));
    f(msg);
    return {};
  };
}

// The reverse, for what starts a process (a restart): dropped while one runs already.
template <class Self, class Dormant, class F>
auto when_dormant(Self* self, Dormant dormant, F f) {
  using msg_t = typename handler_message<F>::type;
  return [self, dormant, f](msg_t& msg) -> one_way {
    if (!dormant()) {
      on_dropped(self, msg);
      return {};
    }
    on_received(self, msg, received_bytes(self->state, msg));
    f(msg);
    return {};
  };
}

// start_msg arrived: it is the first input on the tape (recorded here, by the actor, so that a
// deployed node's actors record the start their leader sent), and what came before it goes
// back into the mailbox, behind the start.
template <class Self>
void started_now(Self* self, const start_msg& msg) {
  auto& out = self->state.out;
  tape_input(self, tape_kind::start, msg, nullptr);
  out.started = true;
  for (auto& m : out.before_start) {
    self->enqueue(caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, std::move(m)),
                  self->context());
  }
  out.before_start.clear();
}

}  // namespace diloco
