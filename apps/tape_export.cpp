#include "apps/tape_export.hpp"

#include <cinttypes>
#include <cstdio>
#include <deque>
#include <map>
#include <tuple>

#include "runtime/channels.hpp"
#include "protocol/wire.hpp"

namespace diloco {

namespace {

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

// Microseconds of simulated time since the first event, with nanosecond precision.
std::string micros(const tape& t, int64_t tick, int64_t origin) {
  const int64_t ns = (tick - origin) / t.header.tick_scale;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
  return buf;
}

std::string host_name(const tape& t, uint32_t actor) {
  std::string n = tape_actor_name(t, actor);
  for (auto& c : n) {
    if (c == ' ') c = '-';
  }
  return n;
}

}  // namespace

std::string tape_actor_name(const tape& t, uint32_t actor) {
  if (actor >= t.header.roles.size()) return "actor " + std::to_string(actor);
  const auto role = static_cast<actor_role>(t.header.roles[actor]);
  uint32_t first = 0;
  while (first < actor && t.header.roles[first] != t.header.roles[actor]) ++first;
  const std::string name = to_string(role);
  if (role == actor_role::learner || role == actor_role::shard)
    return name + " " + std::to_string(actor - first);
  return name;
}

std::vector<int64_t> match_sends(const tape& t) {
  // Links are FIFO: the k-th receipt of (sender, receiver, content) is the k-th such send. A
  // link that duplicated a message delivers it twice: the copy matches the same send.
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, std::deque<int64_t>> open;
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, int64_t> last;
  std::vector<int64_t> from(t.events.size(), -1);
  for (size_t i = 0; i < t.events.size(); ++i) {
    const auto& e = t.events[i];
    if (e.kind == tape_kind::sent) {
      open[{e.actor, e.peer, e.digest}].push_back(static_cast<int64_t>(i));
    } else if ((e.kind == tape_kind::message || e.kind == tape_kind::dropped) && !e.clock.empty()) {
      const auto key = std::make_tuple(e.peer, e.actor, e.digest);
      auto& q = open[key];
      if (!q.empty()) {
        from[i] = q.front();
        last[key] = q.front();
        q.pop_front();
      } else if (auto it = last.find(key); it != last.end()) {
        from[i] = it->second;
      }
    }
  }
  return from;
}

std::string chrome_trace_json(const tape& t) {
  const auto from = match_sends(t);
  const int64_t origin = t.events.empty() ? 0 : t.events.front().tick;
  std::string out = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"run_id\":\"";
  char id[24];
  std::snprintf(id, sizeof id, "%016" PRIx64, t.header.run_id);
  out += id;
  out += "\",\"clock\":\"simulated\"},\"traceEvents\":[\n";
  out +=
      "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"diloco "
      "run " +
      std::string(id) + "\"}}";
  for (uint32_t a = 0; a < t.header.roles.size(); ++a) {
    out += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" + std::to_string(a) +
           ",\"args\":{\"name\":\"" + json_escape(tape_actor_name(t, a)) + "\"}}";
    out +=
        ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":" + std::to_string(a) +
        ",\"args\":{\"sort_index\":" + std::to_string(a) + "}}";
  }
  for (size_t i = 0; i < t.events.size(); ++i) {
    const auto& e = t.events[i];
    const std::string type = wire_tag_name(e.type);
    const std::string name = e.kind == tape_kind::sent ? "send " + type : type;
    out += ",\n{\"name\":\"" + json_escape(name) + "\",\"cat\":\"" + to_string(e.kind) +
           "\",\"ph\":\"X\",\"pid\":1,\"tid\":" + std::to_string(e.actor) +
           ",\"ts\":" + micros(t, e.tick, origin) +
           ",\"dur\":0.001,\"args\":{\"seq\":" + std::to_string(e.seq);
    if (e.kind == tape_kind::sent)
      out += ",\"to\":\"" + json_escape(tape_actor_name(t, e.peer)) + "\"";
    if (e.kind == tape_kind::message || e.kind == tape_kind::dropped) {
      if (!e.clock.empty()) out += ",\"from\":\"" + json_escape(tape_actor_name(t, e.peer)) + "\"";
    }
    out += "}}";
    if (from[i] >= 0) {
      const auto& s = t.events[static_cast<size_t>(from[i])];
      const std::string flow = std::to_string(i);
      out += ",\n{\"name\":\"" + json_escape(type) +
             "\",\"cat\":\"message\",\"ph\":\"s\",\"id\":" + flow +
             ",\"pid\":1,\"tid\":" + std::to_string(s.actor) +
             ",\"ts\":" + micros(t, s.tick, origin) + "}";
      out += ",\n{\"name\":\"" + json_escape(type) +
             "\",\"cat\":\"message\",\"ph\":\"f\",\"bp\":\"e\",\"id\":" + flow +
             ",\"pid\":1,\"tid\":" + std::to_string(e.actor) +
             ",\"ts\":" + micros(t, e.tick, origin) + "}";
    }
  }
  out += "\n]}\n";
  return out;
}

std::string shiviz_log(const tape& t) {
  // Vector clocks by Fidge's rules over what the tape shows (every logged event ticks its
  // actor; a receipt first merges its send's clock), so ShiViz's checks hold by construction.
  const auto from = match_sends(t);
  const size_t n = t.header.roles.size();
  std::vector<std::vector<uint64_t>> local(n, std::vector<uint64_t>(n, 0));
  std::vector<std::vector<uint64_t>> at(t.events.size());
  std::string out = "(?<event>.*)\\n(?<host>\\S*) (?<clock>{.*})\n\n";
  for (size_t i = 0; i < t.events.size(); ++i) {
    const auto& e = t.events[i];
    auto& mine = local[e.actor];
    if (from[i] >= 0) {
      const auto& theirs = at[static_cast<size_t>(from[i])];
      for (size_t k = 0; k < n; ++k) mine[k] = std::max(mine[k], theirs[k]);
    }
    mine[e.actor] += 1;
    if (e.kind == tape_kind::sent) at[i] = mine;
    std::string what = to_string(e.kind);
    what += " " + wire_tag_name(e.type);
    if (e.kind == tape_kind::sent) what += " to " + tape_actor_name(t, e.peer);
    if ((e.kind == tape_kind::message || e.kind == tape_kind::dropped) && !e.clock.empty())
      what += " from " + tape_actor_name(t, e.peer);
    what += " at " + micros(t, e.tick, 0) + " us";
    out += what + "\n" + host_name(t, e.actor) + " {";
    bool first = true;
    for (size_t k = 0; k < n; ++k) {
      if (mine[k] == 0) continue;
      out += (first ? "\"" : ", \"") + host_name(t, static_cast<uint32_t>(k)) +
             "\":" + std::to_string(mine[k]);
      first = false;
    }
    out += "}\n";
  }
  return out;
}

}  // namespace diloco
