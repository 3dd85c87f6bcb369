// The bulk channel: tensor payloads between the processes of a deployed run, on their own TCP
// connections (Boost.Asio), while the messages that refer to them stay on CAF's middleman.
//
// Why: CAF 0.17.6 moves a 16 MiB blob through BASP at about a third of what a raw TCP stream
// does on the same host (bench/bench_transport.cpp). The sender pushes the bytes of a blob to
// the destination node under a fresh id and sends the message with a reference in place of the
// blob (protocol/tensor_blob.hpp); the receiving node's resolver waits for the id's bytes while
// CAF deserializes the message. So the message, its stamp and vector clock, its validation and
// its place on a replay tape are the same as without the channel.
//
// Wire format (little endian): the accepting side sends a challenge and the connecting side
// answers with its hello and a tag (net/handshake.hpp; hello magic "DLBH", challenge "DLBC"),
// then sends frames, each a header
//   magic "DLBF" (u32), flags (u32), id (u64), length (u64)                   = 24 bytes
// and `length` payload bytes. Flags: bit 0, the frame is on the background lane; other bits
// must be zero. Ids carry the sending node's index in their top 16 bits. The accepting side
// answers each frame it holds whole with an acknowledgement on the same connection: a header
// with magic "DLBA", the frame's id and length 0; and, every half second while a background
// frame waits for room before its payload is read, a wait notice: magic "DLBW", the frame's
// id, length 0.
//
// Acknowledgements are what keeps a node's CAF connection free: the sender hands the message
// that names a payload to CAF only once the payload is acknowledged (push's `done`), so a
// receiver finds the bytes in its inbox when it deserializes the message and never waits there
// (a wait inside deserialization would hold CAF's middleman, heartbeats included, for as long
// as a large payload takes to arrive).
//
// Two lanes per destination node, each its own connection: payloads (outer gradients, fragment
// updates, copies) and background (snapshot parts), so that a snapshot part of gigabytes does
// not hold the payloads queued behind it.
//
// With TLS options every connection is mutual TLS (Boost.Asio over OpenSSL), the hello and
// frames inside it.
//
// Hostile input: a connection whose answer has the wrong magic, version, identity, node or tag,
// that has not answered within hello_timeout_s, or whose frame has the wrong magic, an id of
// another node, a length above max_frame_bytes, or ends inside a frame, is closed and counted
// (stats); the others go on. At most pending_max connections may be waiting for their answer
// at once: more are closed at once, so idle connections cannot take the process's descriptors.
// Payload bytes are not checked here: the codec's own checksum and shape checks reject a bad
// blob at decode. An acknowledgement that names no frame in flight closes the sender's
// connection (its frames go again on a new one).
//
// Memory: a frame's length is only a claim: its buffer grows as its bytes arrive (chunks of
// 1 MiB), so a header claiming gigabytes costs nothing until the bytes come. A receiver holds
// at most max(inbox_limit_bytes, max_frame_bytes) of payloads from one sending node, unclaimed
// or being read (max_frame_bytes is the largest message, so a message's payloads always fit
// together); beyond that it stops reading that node's frames, in their order of arrival, and
// TCP pushes back on the sender. A payload nobody claimed for stale_after_s is given up when
// room is needed. A sender's push never waits: its frames queue per lane, and when a lane has
// made no progress (no bytes written, no acknowledgement or wait notice, no connection) for
// wait_timeout_s, the frames not yet started are dropped, counted, and their `done` called
// with false. A snapshot part waiting for the background budget is not on a stalled link:
// the receiver's wait notices keep the sender's background lane alive for as long as the wait
// takes.
//
// Snapshot parts (the background lane) from all senders together share one budget of the same
// size, and the bytes of a part count against it until whoever claimed them lets them go (the
// snapshot coordinator, once it has written them; a holder that keeps them for stale_after_s
// is no longer waited for). One sender's parts come in at a time: a receiver holds about one
// snapshot part at a time, not one from each of its senders. The payload lane never waits for
// the background one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/held_bytes.hpp"
#include "base/status.hpp"

namespace diloco {

struct bulk_stats {
  uint64_t frames_sent = 0, bytes_sent = 0;
  uint64_t frames_received = 0, bytes_received = 0;
  uint64_t connections_accepted = 0;
  // Incoming connections closed for bad input, by reason.
  uint64_t bad_hello = 0, bad_frame = 0, oversized = 0, truncated = 0;
  uint64_t hello_timeout = 0;      // no answer to the challenge within hello_timeout_s
  uint64_t over_capacity = 0;      // closed at once: pending_max connections were waiting already
  uint64_t send_dropped = 0;       // payloads dropped: their lane stalled for wait_timeout_s
  uint64_t acked = 0;              // payloads the receiver acknowledged
  uint64_t bad_ack = 0;            // acknowledgements naming no frame in flight
  uint64_t unresolved = 0;         // references whose bytes did not come in time
  uint64_t inbox_bytes_peak = 0;   // most payload bytes held unclaimed at once
  uint64_t queued_bytes_peak = 0;  // most payload bytes queued or unacknowledged at once
  // Background frames (snapshot parts) that waited for room, and the most background bytes
  // alive at once (read, unclaimed, or claimed and not yet let go).
  uint64_t background_waits = 0, background_bytes_peak = 0;
  // Wait notices: sent for frames waiting for room (receiver), heard for frames (sender).
  uint64_t waits_announced = 0, waits_heard = 0;
};

struct bulk_peer {
  std::string host;
  uint16_t port = 0;
};

struct bulk_options {
  uint32_t self = 0;             // this node's index
  std::vector<bulk_peer> peers;  // every node by index (this node's entry is not used)
  std::string listen_host = "0.0.0.0";
  uint16_t listen_port = 0;  // 0: any free port (see bulk_channel::port)
  uint64_t identity = 0;     // run identity: a hello with another one is refused
  // What hellos are tagged with (net/handshake.hpp): the run's shared secret; empty: the
  // identity (no authentication).
  std::string secret;
  double hello_timeout_s = 5;  // a connection must have answered the challenge by then
  uint32_t pending_max = 32;   // connections waiting for their answer at once
  // The largest payload a frame may claim: the largest legal message of the run
  // (run_config::largest_payload_bytes for a deployed node).
  uint64_t max_frame_bytes = uint64_t{1} << 31;
  // Payload bytes held from one sending node (at least max_frame_bytes: see Memory above).
  uint64_t inbox_limit_bytes = uint64_t{512} << 20;
  double wait_timeout_s = 30;  // a lane without progress for this long drops what it queued
  // A payload nobody claimed for this long is given up when room is needed (its message was
  // lost): otherwise such payloads could fill the inbox and stop the channel.
  double stale_after_s = 120;
  // Mutual TLS (all three, or none): this node's certificate and key, and the CA every peer's
  // certificate must be signed by. A peer without one is refused during the handshake
  // (counted as bad_hello).
  std::string tls_ca, tls_certificate, tls_key;
};

class bulk_channel {
 public:
  using bytes_ptr = std::shared_ptr<const std::vector<uint8_t>>;
  // Called once per payload pushed, on the channel's I/O thread: true once the receiver has
  // acknowledged it whole, false when it was dropped (counted).
  using done_fn = std::function<void(bool)>;
  enum class lane : uint8_t { payload = 0, background = 1 };

  // Listens (SO_REUSEADDR) and starts the channel's I/O thread; connections to peers are made
  // on first use and retried until the wait timeout.
  static result<std::unique_ptr<bulk_channel>> open(const bulk_options& options);
  ~bulk_channel();
  bulk_channel(const bulk_channel&) = delete;
  bulk_channel& operator=(const bulk_channel&) = delete;

  uint16_t port() const;
  // Queues `bytes` for node `node` on lane `l` and returns the id they travel under (0: no such
  // node, or this one: nothing is sent and `done` is not called). Never waits.
  uint64_t push(uint32_t node, held_bytes bytes, done_fn done = {}, lane l = lane::payload);
  // The bytes sent under `id` (their size must be `size`), waiting for them up to `wait_s`
  // (a deployed node does not wait: the message naming them comes after their
  // acknowledgement); nullptr when they are not there (counted).
  bytes_ptr take(uint64_t id, uint64_t size, double wait_s = 0);
  bulk_stats stats() const;
  // Node `node`'s process went away: drop the connections to it (a write into one could still
  // succeed, and be lost), so that what is queued, unacknowledged or pushed next goes on new
  // connections, to its restarted process.
  void reset(uint32_t node);

  // The node whose process made an id.
  static uint32_t origin_of(uint64_t id) { return static_cast<uint32_t>(id >> 48); }

 private:
  struct impl;
  explicit bulk_channel(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace diloco
