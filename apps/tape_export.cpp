#include "apps/tape_export.hpp"

#include <cinttypes>
#include <cstdio>
#include <deque>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "protocol/wire.hpp"
#include "runtime/channels.hpp"

namespace diloco {

namespace {

// Microseconds of simulated time since the first event, with nanosecond precision.
std::string micros(const tape& t, int64_t tick, int64_t origin) {
  const int64_t ns = (tick - origin) / t.header.tick_scale;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
  return buf;
}

// The same as a JSON number (exact to the nanosecond below 2^53 ns, about 104 days).
double micros_number(const tape& t, int64_t tick, int64_t origin) {
  return static_cast<double>((tick - origin) / t.header.tick_scale) / 1000.0;
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
  using json = nlohmann::ordered_json;
  const auto from = match_sends(t);
  const int64_t origin = t.events.empty() ? 0 : t.events.front().tick;
  char id[24];
  std::snprintf(id, sizeof id, "%016" PRIx64, t.header.run_id);
  // One event per line, written as it is made: a long tape's trace is not held twice.
  std::string out =
      json{{"displayTimeUnit", "ms"}, {"otherData", {{"run_id", id}, {"clock", "simulated"}}}}
          .dump();
  out.pop_back();  // the closing brace: the event list follows
  out += ",\"traceEvents\":[\n";
  out += json{{"name", "process_name"},
              {"ph", "M"},
              {"pid", 1},
              {"tid", 0},
              {"args", {{"name", "diloco run " + std::string(id)}}}}
             .dump();
  auto line = [&out](const json& event) { out += ",\n" + event.dump(); };
  for (uint32_t a = 0; a < t.header.roles.size(); ++a) {
    line({{"name", "thread_name"},
          {"ph", "M"},
          {"pid", 1},
          {"tid", a},
          {"args", {{"name", tape_actor_name(t, a)}}}});
    line({{"name", "thread_sort_index"},
          {"ph", "M"},
          {"pid", 1},
          {"tid", a},
          {"args", {{"sort_index", a}}}});
  }
  for (size_t i = 0; i < t.events.size(); ++i) {
    const auto& e = t.events[i];
    const std::string type = wire_tag_name(e.type);
    json args = {{"seq", e.seq}};
    if (e.kind == tape_kind::sent) args["to"] = tape_actor_name(t, e.peer);
    if ((e.kind == tape_kind::message || e.kind == tape_kind::dropped) && !e.clock.empty())
      args["from"] = tape_actor_name(t, e.peer);
    line({{"name", e.kind == tape_kind::sent ? "send " + type : type},
          {"cat", to_string(e.kind)},
          {"ph", "X"},
          {"pid", 1},
          {"tid", e.actor},
          {"ts", micros_number(t, e.tick, origin)},
          {"dur", 0.001},
          {"args", std::move(args)}});
    if (from[i] >= 0) {
      // The message as a flow from its send to this receipt.
      const auto& s = t.events[static_cast<size_t>(from[i])];
      line({{"name", type},
            {"cat", "message"},
            {"ph", "s"},
            {"id", i},
            {"pid", 1},
            {"tid", s.actor},
            {"ts", micros_number(t, s.tick, origin)}});
      line({{"name", type},
            {"cat", "message"},
            {"ph", "f"},
            {"bp", "e"},
            {"id", i},
            {"pid", 1},
            {"tid", e.actor},
            {"ts", micros_number(t, e.tick, origin)}});
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
    nlohmann::ordered_json clock = nlohmann::ordered_json::object();
    for (size_t k = 0; k < n; ++k) {
      if (mine[k] != 0) clock[host_name(t, static_cast<uint32_t>(k))] = mine[k];
    }
    out += what + "\n" + host_name(t, e.actor) + " " + clock.dump() + "\n";
  }
  return out;
}

}  // namespace diloco
