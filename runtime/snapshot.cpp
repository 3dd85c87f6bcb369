#include "runtime/snapshot.hpp"

#include "base/check.hpp"
#include "protocol/persist.hpp"
#include "protocol/wire.hpp"

namespace diloco {

namespace {

struct stored_message {
  uint32_t sender = 0;
  int64_t tick = 0;
  wire_message msg;
};

template <class F>
void persist_fields(F& f, stored_message& m) {
  f(m.sender, m.tick, m.msg);
}

}  // namespace

std::vector<tensor_blob> encode_part(const snapshot_agent& agent) {
  // The bytes of save_bytes(snapshot, state, channel), where `state` is a byte vector: the
  // archive's first byte, the snapshot and the state's length; the state's pieces as they are;
  // then the channel (its own archive less that first byte, which the part has already).
  uint64_t snapshot = agent.epoch;
  uint64_t state_bytes = 0;
  for (const auto& p : agent.state) state_bytes += p.size();
  std::vector<tensor_blob> out;
  out.reserve(agent.state.size() + 2);
  out.emplace_back(save_bytes(snapshot, state_bytes));
  for (const auto& p : agent.state) out.push_back(p);
  std::vector<stored_message> channel;
  channel.reserve(agent.channel.size());
  for (const auto& r : agent.channel)
    channel.push_back(stored_message{r.sender, r.tick, wire_message{r.msg}});
  std::vector<uint8_t> tail = save_bytes(channel);
  DILOCO_CHECK(!tail.empty(), "snapshot: an archive starts with its byte order");
  tail.erase(tail.begin());
  out.emplace_back(std::move(tail));
  return out;
}

std::vector<uint8_t> join_pieces(const std::vector<tensor_blob>& pieces) {
  size_t n = 0;
  for (const auto& p : pieces) n += p.size();
  std::vector<uint8_t> out;
  out.reserve(n);
  for (const auto& p : pieces) out.insert(out.end(), p.view().begin(), p.view().end());
  return out;
}

result<snapshot_part_contents> decode_part(byte_view bytes, const std::string& what) {
  snapshot_part_contents out;
  std::vector<stored_message> channel;
  bytes_in_place state;
  if (auto s = load_bytes(bytes, what, out.snapshot, state, channel); !s.ok()) return s;
  out.state = state.bytes;
  for (auto& m : channel)
    out.channel.push_back(recorded_message{m.sender, m.tick, std::move(m.msg.msg)});
  return out;
}

}  // namespace diloco
