// How actors send: stamp the message (vector clock tick, sender, send time), model the link in
// simulated time, count bytes. Actor code calls `post`; it never calls CAF's send directly for
// messages between roles, so every inter-actor message is stamped, counted and (in simulation)
// delayed the same way.
#pragma once

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "actors/digest.hpp"
#include "actors/env.hpp"
#include "protocol/messages.hpp"

namespace diloco {

// The sending side of an actor: its clock, its identity, its outgoing links (simulated FIFO
// pipes, one per destination actor index) and byte counters.
struct outbox {
  uint32_t self_index = 0;
  vector_clock clock;
  std::vector<int64_t> link_free_ns;  // per destination index: when the pipe is next idle
  uint64_t bytes_sent = 0;
  uint64_t messages_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t trace = 0;  // everything received and every timer fired, in order (trace hash)

  // Tick and stamp for a send at time now_ns.
  stamp make_stamp(int64_t now_ns) {
    clock.tick(self_index);
    return stamp{self_index, clock, now_ns};
  }

  // Receipt of a message with content digest `content` (actors/digest.hpp): merge the
  // sender's clock, tick, and fold the message into the trace.
  void on_receive(const stamp& st, uint64_t bytes, uint64_t content) {
    clock.merge(st.clock);
    clock.tick(self_index);
    bytes_received += bytes;
    trace = mix(mix(mix(trace, st.sender), digest_of(st.clock)), content);
  }

  // A timer this actor set fired.
  void on_timer(uint64_t content) { trace = mix(trace, content); }

  // Delivery delay of `bytes` to `dest` over a simulated link, queueing behind earlier sends.
  int64_t link_delay_ns(const link_config& link, uint32_t dest, int64_t now_ns, uint64_t bytes) {
    if (dest >= link_free_ns.size()) link_free_ns.resize(dest + 1, 0);
    const int64_t start = std::max(now_ns, link_free_ns[dest]);
    const auto transmit =
        static_cast<int64_t>(static_cast<double>(bytes) * 8.0 / (link.bandwidth_gbps));
    link_free_ns[dest] = start + transmit;
    return (start - now_ns) + transmit + to_ns(link.latency_s);
  }
};

// Wire size of a message: its tensor payload plus a fixed allowance for fields and stamp.
constexpr uint64_t message_overhead_bytes = 64;

// Sends msg from self to dest: through a simulated link when `linked` and the env runs in
// virtual time, directly otherwise. `bytes` is what the message costs on the wire.
template <class Self, class Dest, class Msg>
void post(Self* self, const actor_env& env, outbox& out, uint32_t dest_index, const Dest& dest,
          uint64_t bytes, bool linked, Msg&& msg) {
  out.bytes_sent += bytes;
  out.messages_sent += 1;
  if (env.virtual_time && linked) {
    const int64_t now = self->clock().now().time_since_epoch() / std::chrono::nanoseconds(1);
    const int64_t delay = out.link_delay_ns(env.config.link, dest_index, now, bytes);
    self->delayed_send(dest, std::chrono::nanoseconds(delay), std::forward<Msg>(msg));
  } else {
    self->send(dest, std::forward<Msg>(msg));
  }
}

template <class Self>
int64_t now_ns(Self* self) {
  return self->clock().now().time_since_epoch() / std::chrono::nanoseconds(1);
}

}  // namespace diloco
