// Digests of messages for the trace hash: what an actor received, in order, folded into one
// number. Two runs with the same trace hash saw the same messages in the same order at every
// actor. Payloads enter by their blob checksum, so digests cost nothing per value.
#pragma once

#include <cstdint>
#include <cstring>

#include "protocol/messages.hpp"
#include "tensor/rng.hpp"

namespace diloco {

inline uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t s = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  return splitmix64(s);
}

template <class... Ts>
uint64_t digest(Ts... values) {
  uint64_t h = 0;
  ((h = mix(h, static_cast<uint64_t>(values))), ...);
  return h;
}

inline uint64_t digest_of(const vector_clock& c) {
  uint64_t h = 0;
  c.for_each([&](uint64_t t) { h = mix(h, t); });
  return h;
}

// A blob's own checksum (header bytes 24..32), or its size when it has no header.
inline uint64_t digest_of(const tensor_blob& b) {
  if (b.size() < 32) return b.size();
  uint64_t sum = 0;
  std::memcpy(&sum, b.view().data() + 24, 8);
  return sum;
}

inline uint64_t digest_of(const double& d) {
  uint64_t u = 0;
  std::memcpy(&u, &d, 8);
  return u;
}

inline uint64_t message_digest(const join_msg& m) {
  return digest(1, m.learner, m.rejoin);
}
inline uint64_t message_digest(const schedule_msg& m) {
  uint64_t h = digest(2, m.period_steps, m.overlap_steps, m.global_clock, m.epoch_ns, m.step_ns);
  for (uint32_t o : m.offsets) h = mix(h, o);
  // Only a changed schedule mixes these: runs with a fixed H keep their trace hashes.
  if (m.change != 0) h = mix(mix(h, m.from_step), m.change);
  return h;
}
inline uint64_t message_digest(const outer_gradient_msg& m) {
  const uint64_t h = digest(3, m.fragment, m.learner, m.base_version, m.tokens, m.steps,
                            m.send_step, m.deadline_ns, m.final, digest_of(m.delta));
  return m.overlap_steps != 0 ? mix(h, m.overlap_steps) : h;
}
inline uint64_t message_digest(const fragment_update_msg& m) {
  uint64_t h = digest(4, m.fragment, m.from_version, m.to_version, m.reply_to_step, m.full);
  for (const auto& b : m.blobs) h = mix(h, digest_of(b));
  if (m.uplink_ns != 0 || m.latency_ns != 0)
    h = mix(mix(h, static_cast<uint64_t>(m.uplink_ns)), static_cast<uint64_t>(m.latency_ns));
  return h;
}
inline uint64_t message_digest(const pull_msg& m) {
  return digest(5, m.learner, m.fragment);
}
inline uint64_t message_digest(const gradient_msg& m) {
  return digest(6, m.fragment, m.learner, m.step, digest_of(m.grad));
}
inline uint64_t message_digest(const reduced_gradient_msg& m) {
  return digest(7, m.fragment, m.step, m.contributors, digest_of(m.grad));
}
inline uint64_t message_digest(const progress_msg& m) {
  const uint64_t h = digest(8, m.learner, m.tokens, m.steps, digest_of(m.train_loss), m.busy_ns,
                            m.idle_ns, digest_of(m.chip_s), m.bytes_sent, m.bytes_received,
                            digest_of(m.merge_gap_sum), m.merge_gaps);
  return m.period_steps != 0 ? mix(mix(h, m.period_steps), m.overlap_steps) : h;
}
inline uint64_t message_digest(const pace_msg& m) {
  return digest(45, m.learner, m.change, m.step_ns, digest_of(m.bits_per_ns), m.latency_ns,
                m.period_bytes, m.round_ns);
}
inline uint64_t message_digest(const stop_msg&) {
  return 9;
}
inline uint64_t message_digest(const flushed_msg& m) {
  return digest(10, m.shard);
}
inline uint64_t message_digest(const diverged_msg& m) {
  uint64_t h = digest(43, m.learner, m.step);
  for (char c : m.what) h = mix(h, static_cast<uint64_t>(static_cast<unsigned char>(c)));
  return h;
}
inline uint64_t message_digest(const merge_msg& m) {
  uint64_t h = digest(42, m.shard, m.fragment, m.version, m.quorum, m.live, m.delta_bytes,
                      m.fp32_bytes, m.dropped_stale, m.dropped_duplicate, m.rejected);
  for (size_t i = 0; i < m.learners.size(); ++i) h = mix(h, m.learners[i]);
  for (auto t : m.tokens) h = mix(h, t);
  for (auto d : m.delays_ns) h = mix(h, static_cast<uint64_t>(d));
  for (auto g : m.version_gaps) h = mix(h, g);
  for (auto t : m.tensors) h = mix(h, t);
  for (float c : m.cosines) h = mix(h, digest_of(c));
  return h;
}
inline uint64_t message_digest(const capacity_msg& m) {
  return digest(11, digest_of(m.capacity), m.pause_ns);
}
inline uint64_t message_digest(const step_tick& m) {
  return digest(12, m.seq);
}
inline uint64_t message_digest(const grace_tick& m) {
  return digest(13, m.fragment, m.round, m.incarnation);
}
inline uint64_t message_digest(const fault_tick& m) {
  return digest(14, m.event, m.restart);
}
inline uint64_t message_digest(const chaos_tick& m) {
  return digest(15, m.learner, static_cast<uint8_t>(m.kind), m.incarnation);
}
inline uint64_t message_digest(const deadline_tick&) {
  return 16;
}

inline uint64_t message_digest(const leave_msg&) {
  return 17;
}
inline uint64_t message_digest(const peer_msg& m) {
  return digest(18, m.shard, m.incarnation);
}
inline uint64_t message_digest(const copy_request& m) {
  uint64_t h = 19;
  for (uint32_t f : m.fragments) h = mix(h, f);
  return h;
}
inline uint64_t message_digest(const copy_msg& m) {
  return digest(20, m.fragment, m.learner, m.version, digest_of(m.value));
}
inline uint64_t message_digest(const recovery_tick& m) {
  return digest(21, m.incarnation);
}
inline uint64_t message_digest(const service_tick& m) {
  return digest(44, m.incarnation);
}
inline uint64_t message_digest(const membership_tick& m) {
  return digest(22, m.event);
}
inline uint64_t message_digest(const shard_tick& m) {
  return digest(23, m.event, m.restart);
}
inline uint64_t message_digest(const kill_msg&) {
  return 24;
}
inline uint64_t message_digest(const start_msg& m) {
  // A first start keeps the digest it had before restarts existed (recorded tapes stay valid).
  return m.incarnation == 0 ? digest(41, digest_of(m.restore))
                            : digest(41, digest_of(m.restore), m.incarnation);
}
inline uint64_t message_digest(const restart_msg& m) {
  return digest(25, m.incarnation);
}
inline uint64_t message_digest(const closed_msg& m) {
  return digest(26, m.incarnation);
}
inline uint64_t message_digest(const snapshot_request& m) {
  return digest(27, m.steps);
}
inline uint64_t message_digest(const snapshot_tick& m) {
  return digest(28, m.seq);
}

}  // namespace diloco
