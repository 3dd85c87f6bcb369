#include "runtime/snapshot.hpp"

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

std::vector<uint8_t> encode_part(const snapshot_agent& agent) {
  uint64_t snapshot = agent.epoch;
  std::vector<uint8_t> state = agent.state;
  std::vector<stored_message> channel;
  channel.reserve(agent.channel.size());
  for (const auto& r : agent.channel)
    channel.push_back(stored_message{r.sender, r.tick, wire_message{r.msg}});
  return save_bytes(snapshot, state, channel);
}

result<snapshot_part_contents> decode_part(byte_view bytes, const std::string& what) {
  snapshot_part_contents out;
  std::vector<stored_message> channel;
  if (auto s = load_bytes(bytes, what, out.snapshot, out.state, channel); !s.ok()) return s;
  for (auto& m : channel)
    out.channel.push_back(recorded_message{m.sender, m.tick, std::move(m.msg.msg)});
  return out;
}

}  // namespace diloco
