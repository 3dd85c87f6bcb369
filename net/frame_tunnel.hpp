// The framing front of a node's CAF port. CAF 0.17.6's middleman crashes on garbage
// (docs/deploy.md), so a deployed node's middleman listens on loopback only, and the node's
// public port belongs to this tunnel: every connection must open with a hello naming a node of
// the cluster and the run's identity, and then carry the middleman's bytes in frames of
// bounded length. Input that is not that is closed and counted before CAF sees a byte.
// Outgoing, CAF connects to a local port of the tunnel per peer node, which connects to that
// node's front, says hello, and frames the bytes. With mutual TLS, CAF's TLS runs inside the
// frames, end to end.
//
// Wire format (little endian): the front sends a challenge, the connecting side answers with
// its hello and a tag (net/handshake.hpp; challenge magic "DLTC", hello "DLTH"), then frames
// = magic "DLTF" (u32), length (u32), and `length` bytes (1 .. max_frame_bytes).
// A connection must have answered within hello_timeout_s; at most pending_max may be waiting
// for their answer at once (more are closed at once), so idle connections hold no more than
// that many descriptors. With a shared secret, only a holder of it reaches the middleman.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "net/bulk_channel.hpp"

namespace diloco {

struct tunnel_options {
  uint32_t self = 0;
  std::vector<bulk_peer> peers;  // every node's public (front) address, by index
  std::string listen_host = "0.0.0.0";
  uint16_t front_port = 0;  // public
  uint16_t caf_port = 0;    // the middleman's port on 127.0.0.1
  uint64_t identity = 0;
  std::string secret;  // the run's shared secret; empty: hellos are tagged with the identity
  uint32_t max_frame_bytes = 1 << 20;
  // The largest message payload the middleman may be told to expect (its protocol's header
  // declares each message's length, and it allocates that much before reading it): a
  // message above it closes the connection before the header reaches CAF. 0: not checked
  // (with mutual TLS the middleman's stream is encrypted end to end and cannot be read here).
  uint64_t max_message_bytes = 0;
  double hello_timeout_s = 5;
  uint32_t pending_max = 32;
};

struct tunnel_stats {
  uint64_t accepted = 0;           // connections to the front
  uint64_t tunnels = 0;            // of them, through to CAF after a good hello
  uint64_t bad_hello = 0;          // closed: not a hello of this run (garbage, other run, bad node)
  uint64_t bad_frame = 0;          // closed: bad magic or zero length
  uint64_t oversized = 0;          // closed: a length above max_frame_bytes
  uint64_t oversized_message = 0;  // closed: a message declared above max_message_bytes
  uint64_t truncated = 0;          // closed inside a hello or frame
  uint64_t hello_timeout = 0;      // closed: no answer to the challenge within hello_timeout_s
  uint64_t over_capacity = 0;      // closed at once: pending_max connections were waiting already
  uint64_t bytes_in = 0, bytes_out = 0;  // framed payload bytes through the front
};

class frame_tunnel {
 public:
  static result<std::unique_ptr<frame_tunnel>> open(const tunnel_options& options);
  ~frame_tunnel();
  frame_tunnel(const frame_tunnel&) = delete;
  frame_tunnel& operator=(const frame_tunnel&) = delete;

  // Where CAF connects to reach node `node` (a port on 127.0.0.1); 0 for this node.
  uint16_t outbound_port(uint32_t node) const;
  uint16_t front_port() const;
  tunnel_stats stats() const;
  // Why node `node`'s front refused this node's hello ("": it did not).
  std::string refusal(uint32_t node) const;

 private:
  struct impl;
  explicit frame_tunnel(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace diloco
