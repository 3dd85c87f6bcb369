#include "observe/tape_export.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "protocol/messages.hpp"
#include "protocol/wire.hpp"
#include "runtime/channels.hpp"
#include "runtime/tape.hpp"

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
// Each tick is taken to its nanosecond first, so that a time given in nanoseconds (a timer's
// set time) and a tick of the same nanosecond land on the same microsecond.
double micros_number(const tape& t, int64_t tick, int64_t origin) {
  return static_cast<double>(tick / t.header.tick_scale - origin / t.header.tick_scale) / 1000.0;
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
  // A receipt carries its send's stamp: sender, receiver, content and the vector clock at the
  // send, which ticks on every send, so the key names one send. A link that duplicated a
  // message delivers it twice: both receipts match it. The tapes of a deployed run's nodes match
  // across nodes the same way, whatever order they are read in.
  using key = std::tuple<uint32_t, uint32_t, uint64_t, std::vector<uint64_t>>;
  std::map<key, int64_t> sends;
  for (size_t i = 0; i < t.events.size(); ++i) {
    const auto& e = t.events[i];
    if (e.kind == tape_kind::sent) sends.emplace(key{e.actor, e.peer, e.digest, e.clock}, i);
  }
  std::vector<int64_t> from(t.events.size(), -1);
  for (size_t i = 0; i < t.events.size(); ++i) {
    const auto& e = t.events[i];
    if ((e.kind != tape_kind::message && e.kind != tape_kind::dropped) || e.clock.empty()) continue;
    if (auto it = sends.find(key{e.peer, e.actor, e.digest, e.clock}); it != sends.end())
      from[i] = it->second;
  }
  return from;
}

namespace {

// Where each event goes on the exported timeline.
struct timeline {
  std::vector<size_t> order;  // the events (reads left out) in a causal order
  std::vector<int64_t> from;  // match_sends
  std::vector<double> ts_us;  // by event: its time in microseconds
  bool logical = false;       // ts_us is Lamport time (asked for: several hosts' tapes)
  int64_t origin = 0;         // the tick at time 0
  // Several hosts' tapes in real time: by event, the ticks its host's clock is ahead of the
  // first node's (estimated), taken off its times; and what the clock note says.
  std::vector<int64_t> shift;
  std::string clock_note;
  int64_t shifted(size_t event, int64_t tick) const {
    return shift.empty() ? tick : tick - shift[event];
  }
};

// The order of several hosts' events: the ready head (its send placed, or none) with the
// earliest `key`; should the tapes contradict each other, the earliest head at all. `place`
// gets each event in turn with the event it was sent from (or -1 when not placed yet).
template <class Key, class Place>
void causal_order(const tape& t, const timeline& tl, Key key, Place place) {
  const size_t n = t.header.roles.size();
  std::vector<std::deque<size_t>> queue(n);
  for (size_t i = 0; i < t.events.size(); ++i) {
    if (t.events[i].kind != tape_kind::read) queue[t.events[i].actor].push_back(i);
  }
  std::vector<bool> placed(t.events.size(), false);
  for (;;) {
    int64_t pick = -1, any = -1;
    for (size_t a = 0; a < n; ++a) {
      if (queue[a].empty()) continue;
      const size_t i = queue[a].front();
      if (any < 0 || key(i) < key(static_cast<size_t>(any))) any = static_cast<int64_t>(i);
      const bool ready = tl.from[i] < 0 || placed[static_cast<size_t>(tl.from[i])];
      if (ready && (pick < 0 || key(i) < key(static_cast<size_t>(pick))))
        pick = static_cast<int64_t>(i);
    }
    if (any < 0) break;
    const size_t i = static_cast<size_t>(pick >= 0 ? pick : any);
    queue[t.events[i].actor].pop_front();
    const int64_t sent =
        tl.from[i] >= 0 && placed[static_cast<size_t>(tl.from[i])] ? tl.from[i] : -1;
    placed[i] = true;
    place(i, sent);
  }
}

// Each node's clock against the first node's, from the messages between them: a message sent
// at s on node A and received at r on node B says B's clock is at most r - s ahead of A's (its
// delay is not negative); the least such bound each way brackets the offset, and the middle of
// the bracket is taken, within half its width (the estimate NTP makes from round trips). A node
// heard in one direction only gets its bound. By event: its node's offset, in ticks.
std::vector<int64_t> clock_shifts(const tape& t, const timeline& tl, std::string& note) {
  std::vector<std::string> nodes;
  std::vector<size_t> node_of_event(t.events.size(), 0);
  for (size_t i = 0; i < t.events.size(); ++i) {
    const std::string& name = t.segments[t.segment(i)].node;
    auto at = std::find(nodes.begin(), nodes.end(), name);
    if (at == nodes.end()) at = nodes.insert(nodes.end(), name);
    node_of_event[i] = static_cast<size_t>(at - nodes.begin());
  }
  const size_t n = nodes.size();
  constexpr int64_t none = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> least(n, std::vector<int64_t>(n, none));  // [from][to]
  for (size_t i = 0; i < t.events.size(); ++i) {
    if (tl.from[i] < 0) continue;
    const size_t j = static_cast<size_t>(tl.from[i]);
    const size_t a = node_of_event[j], b = node_of_event[i];
    if (a != b) least[a][b] = std::min(least[a][b], t.events[i].tick - t.events[j].tick);
  }
  std::vector<int64_t> offset(n, 0), error(n, -1);  // error < 0: not estimated yet
  error[0] = 0;
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t a = 0; a < n; ++a) {
      for (size_t b = 0; b < n; ++b) {
        if (error[a] < 0 || error[b] >= 0) continue;
        const int64_t ab = least[a][b], ba = least[b][a];
        if (ab != none && ba != none) {
          offset[b] = offset[a] + (ab - ba) / 2;
          error[b] = error[a] + std::max<int64_t>(0, (ab + ba) / 2);
        } else if (ab != none) {
          offset[b] = offset[a] + ab, error[b] = error[a];
        } else if (ba != none) {
          offset[b] = offset[a] - ba, error[b] = error[a];
        } else {
          continue;
        }
        grew = true;
      }
    }
  }
  note = "real time: each node's clock less its offset from node " + nodes[0] +
         "'s, estimated from the messages between them (";
  char buf[96];
  for (size_t b = 1; b < n; ++b) {
    const double ms =
        static_cast<double>(offset[b]) / static_cast<double>(t.header.tick_scale) / 1e6;
    if (error[b] < 0)
      std::snprintf(buf, sizeof buf, "%s%s: no messages, taken as 0", b > 1 ? "; " : "",
                    nodes[b].c_str());
    else
      std::snprintf(buf, sizeof buf, "%s%s: %+.3f ms +- %.3f ms", b > 1 ? "; " : "",
                    nodes[b].c_str(), ms,
                    static_cast<double>(error[b]) / static_cast<double>(t.header.tick_scale) / 1e6);
    note += buf;
  }
  note += ")";
  std::vector<int64_t> shift(t.events.size(), 0);
  for (size_t i = 0; i < t.events.size(); ++i) shift[i] = offset[node_of_event[i]];
  return shift;
}

// One tape: its own order, which is causal (a send is recorded before it is delivered), and
// its clock (simulated, or the host's). Several hosts' tapes: real time, each node's clock less
// its estimated offset (clock_shifts), in an order that follows the messages (each actor's
// events in turn, a receipt after its send); a time the estimate would put before its send or
// its actor's previous event is moved just after it, and counted. `logical`: Lamport time
// instead, from the vector clocks, which needs no clock at all.
timeline lay_out(const tape& t, bool logical = false) {
  timeline tl;
  tl.from = match_sends(t);
  tl.ts_us.assign(t.events.size(), 0);
  auto shown = [&](size_t i) { return t.events[i].kind != tape_kind::read; };
  if (t.segments.empty()) {
    const int64_t origin = t.events.empty() ? 0 : t.events.front().tick;
    tl.origin = origin;
    for (size_t i = 0; i < t.events.size(); ++i) {
      if (!shown(i)) continue;
      tl.order.push_back(i);
      tl.ts_us[i] = micros_number(t, t.events[i].tick, origin);
    }
    return tl;
  }
  const size_t n = t.header.roles.size();
  if (logical) {
    tl.logical = true;
    tl.clock_note = "logical (Lamport time from the vector clocks)";
    std::vector<uint64_t> lamport(n, 0);
    std::vector<uint64_t> at(t.events.size(), 0);
    causal_order(
        t, tl, [&](size_t i) { return t.events[i].tick; },
        [&](size_t i, int64_t sent) {
          const auto& e = t.events[i];
          uint64_t l = lamport[e.actor] + 1;
          if (sent >= 0) l = std::max(l, at[static_cast<size_t>(sent)] + 1);
          at[i] = lamport[e.actor] = l;
          tl.order.push_back(i);
          tl.ts_us[i] = static_cast<double>(l);
        });
    return tl;
  }
  tl.shift = clock_shifts(t, tl, tl.clock_note);
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < t.events.size(); ++i)
    if (shown(i)) origin = std::min(origin, tl.shifted(i, t.events[i].tick));
  tl.origin = origin == std::numeric_limits<int64_t>::max() ? 0 : origin;
  std::vector<double> last(n, -1);
  size_t moved = 0;
  constexpr double nudge = 0.001;  // a nanosecond: a receipt strictly after its send
  causal_order(
      t, tl, [&](size_t i) { return tl.shifted(i, t.events[i].tick); },
      [&](size_t i, int64_t sent) {
        const auto& e = t.events[i];
        double ts = micros_number(t, tl.shifted(i, e.tick), tl.origin);
        double floor = last[e.actor];
        if (sent >= 0) floor = std::max(floor, tl.ts_us[static_cast<size_t>(sent)] + nudge);
        if (ts < floor) ts = floor, ++moved;
        last[e.actor] = ts;
        tl.order.push_back(i);
        tl.ts_us[i] = ts;
      });
  tl.clock_note += "; " + std::to_string(moved) + " of " + std::to_string(tl.order.size()) +
                   " events moved after their send or their actor's previous event";
  return tl;
}

// The node that recorded an actor's event ("" for one tape).
std::string node_of(const tape& t, size_t event) {
  return t.segments.empty() ? std::string() : t.segments[t.segment(event)].node;
}

// Chrome trace events, one per line, written as they are made: a long tape's trace is not
// held twice.
struct trace_lines {
  std::string out;
  bool first = true;
  void line(const nlohmann::ordered_json& event) {
    out += (first ? "" : ",\n") + event.dump();
    first = false;
  }
};

// One process per node (a deployed run's tapes), or one for the run: the nodes in order of
// their first segment, and each actor's process id.
std::vector<int> node_pids(const tape& t, std::vector<std::string>& nodes) {
  for (const auto& seg : t.segments) {
    if (std::find(nodes.begin(), nodes.end(), seg.node) == nodes.end()) nodes.push_back(seg.node);
  }
  std::vector<int> pid_of(t.header.roles.size(), 1);
  for (size_t i = 0; i < t.events.size(); ++i) {
    if (t.segments.empty()) break;
    const auto at = std::find(nodes.begin(), nodes.end(), node_of(t, i));
    pid_of[t.events[i].actor] = static_cast<int>(at - nodes.begin()) + 1;
  }
  if (nodes.empty()) nodes.push_back("");
  return pid_of;
}

// Lanes: tracks under each actor's own for what takes time there. Their thread ids follow the
// actors' (given out as lanes first appear); their sort index puts them below their actor.
enum class lane : int { compute = 1, down = 2, round = 3, grace = 4 };
int64_t track_order(uint32_t actor, lane l = lane{0}, uint32_t fragment = 0) {
  return static_cast<int64_t>(actor) * 100000 + static_cast<int64_t>(l) * 1000 +
         std::min<int64_t>(fragment, 999);
}
// Names of the processes (nodes) and threads (actors), and the actors' order.
void name_tracks(trace_lines& w, const tape& t, const std::vector<std::string>& nodes,
                 const std::vector<int>& pid_of, const std::string& id) {
  auto line = [&w](const nlohmann::ordered_json& event) { w.line(event); };
  for (size_t k = 0; k < nodes.size(); ++k) {
    line({{"name", "process_name"},
          {"ph", "M"},
          {"pid", k + 1},
          {"tid", 0},
          {"args",
           {{"name", nodes[k].empty() ? "diloco run " + std::string(id) : "node " + nodes[k]}}}});
  }
  for (uint32_t a = 0; a < t.header.roles.size(); ++a) {
    if (!t.header.records(a)) continue;
    line({{"name", "thread_name"},
          {"ph", "M"},
          {"pid", pid_of[a]},
          {"tid", a},
          {"args", {{"name", tape_actor_name(t, a)}}}});
    line({{"name", "thread_sort_index"},
          {"ph", "M"},
          {"pid", pid_of[a]},
          {"tid", a},
          {"args", {{"sort_index", track_order(a)}}}});
  }
}

// Every event as a slice on its actor's track, a process start as an instant, and each
// message as a flow from its send to its receipt.
void event_slices(trace_lines& w, const tape& t, const timeline& tl,
                  const std::vector<int>& pid_of) {
  using json = nlohmann::ordered_json;
  auto line = [&w](const json& event) { w.line(event); };
  std::vector<uint32_t> seg_of(t.header.roles.size(), UINT32_MAX);
  // Slices: a simulated or host time is exact to the nanosecond; a logical one is a step.
  const double dur = tl.logical ? 0.8 : 0.001;
  for (size_t i : tl.order) {
    const auto& e = t.events[i];
    const int pid = pid_of[e.actor];
    if (!t.segments.empty() && seg_of[e.actor] != t.segment(i)) {
      // A node's process begins (its first, or a restart after the previous one died).
      const bool restart = seg_of[e.actor] != UINT32_MAX;
      seg_of[e.actor] = t.segment(i);
      const tape_segment& seg = t.segments[seg_of[e.actor]];
      line({{"name", (restart ? "restarted: process " : "process ") +
                         std::to_string(seg.incarnation) + " of node " + seg.node},
            {"cat", "process"},
            {"ph", "i"},
            {"s", "t"},
            {"pid", pid},
            {"tid", e.actor},
            {"ts", tl.ts_us[i]}});
    }
    const std::string type = wire_tag_name(e.type);
    json args = {{"seq", e.seq}};
    if (e.kind == tape_kind::sent) args["to"] = tape_actor_name(t, e.peer);
    if ((e.kind == tape_kind::message || e.kind == tape_kind::dropped) && !e.clock.empty())
      args["from"] = tape_actor_name(t, e.peer);
    if (tl.logical || !tl.shift.empty()) args["host_ns"] = e.tick;
    line({{"name", e.kind == tape_kind::sent ? "send " + type : type},
          {"cat", to_string(e.kind)},
          {"ph", "X"},
          {"pid", pid},
          {"tid", e.actor},
          {"ts", tl.ts_us[i]},
          {"dur", dur},
          {"args", std::move(args)}});
    if (tl.from[i] >= 0) {
      // The message as a flow from its send to this receipt (across nodes too).
      const size_t s = static_cast<size_t>(tl.from[i]);
      line({{"name", type},
            {"cat", "message"},
            {"ph", "s"},
            {"id", i},
            {"pid", pid_of[t.events[s].actor]},
            {"tid", t.events[s].actor},
            {"ts", tl.ts_us[s]}});
      line({{"name", type},
            {"cat", "message"},
            {"ph", "f"},
            {"bp", "e"},
            {"id", i},
            {"pid", pid},
            {"tid", e.actor},
            {"ts", tl.ts_us[i]}});
    }
  }
}

std::string lane_name(const tape& t, uint32_t actor, lane l, uint32_t fragment) {
  const std::string a = tape_actor_name(t, actor);
  switch (l) {
    case lane::compute:
      return a + ": compute";
    case lane::down:
      return a + ": down";
    case lane::round:
      return a + ": rounds of fragment " + std::to_string(fragment);
    case lane::grace:
      return a + ": grace of fragment " + std::to_string(fragment);
  }
  return a;
}

// A message's content, when the tape has it and it is of type T.
template <class T>
std::optional<T> decoded(const tape& t, const tape_event& e) {
  if (e.type != wire_tag_of<T>()) return std::nullopt;
  auto m = tape_message(t, e);
  if (!m || m->size() != 1 || !m->match_element<T>(0)) return std::nullopt;
  return m->get_as<T>(0);
}

// Span slices on lanes under each actor's track, each lane named when it first appears.
class span_lanes {
 public:
  using json = nlohmann::ordered_json;
  span_lanes(trace_lines& w, const tape& t, const std::vector<int>& pid_of)
      : w_(w), t_(t), pid_of_(pid_of) {}

  void span(uint32_t actor, lane l, uint32_t fragment, const std::string& name, double from,
            double to, json args) {
    if (!(to > from)) return;
    const int pid = pid_of_[actor];
    const auto [it, fresh] =
        tids_.emplace(std::make_tuple(actor, l, fragment),
                      static_cast<int64_t>(t_.header.roles.size() + tids_.size()));
    const int64_t tid = it->second;
    if (fresh) {
      w_.line({{"name", "thread_name"},
               {"ph", "M"},
               {"pid", pid},
               {"tid", tid},
               {"args", {{"name", lane_name(t_, actor, l, fragment)}}}});
      w_.line({{"name", "thread_sort_index"},
               {"ph", "M"},
               {"pid", pid},
               {"tid", tid},
               {"args", {{"sort_index", track_order(actor, l, fragment)}}}});
    }
    w_.line({{"name", name},
             {"cat", "span"},
             {"ph", "X"},
             {"pid", pid},
             {"tid", tid},
             {"ts", from},
             {"dur", to - from},
             {"args", std::move(args)}});
  }

 private:
  trace_lines& w_;
  const tape& t_;
  const std::vector<int>& pid_of_;
  std::map<std::tuple<uint32_t, lane, uint32_t>, int64_t> tids_;
};

// The merges the metrics actor heard, by the shard's send event.
std::map<size_t, merge_msg> merges_by_send(const tape& t, const timeline& tl) {
  std::map<size_t, merge_msg> merges;
  for (size_t i : tl.order) {
    const auto& e = t.events[i];
    if (e.kind == tape_kind::message && tl.from[i] >= 0) {
      if (auto m = decoded<merge_msg>(t, e)) merges.emplace(static_cast<size_t>(tl.from[i]), *m);
    }
  }
  return merges;
}

// Per event, when its actor's next event is (-1 for its last). Real time: a learner computes
// its step while it handles the step timer, so the step lasts until the learner's next event;
// in simulation the timer's delay is the step's time.
std::vector<double> next_event_us(const tape& t, const timeline& tl) {
  std::vector<double> next_of(t.events.size(), -1);
  std::vector<int64_t> last(t.header.roles.size(), -1);
  for (size_t i : tl.order) {
    const uint32_t a = t.events[i].actor;
    if (last[a] >= 0) next_of[static_cast<size_t>(last[a])] = tl.ts_us[i];
    last[a] = static_cast<int64_t>(i);
  }
  return next_of;
}

// Step timers that are not a step: one a later timer superseded before it fired (the learner
// ignores it), and a rejoining learner's reminder to ask again for its fragments (it sends
// pulls when it fires).
std::vector<bool> timers_not_a_step(const tape& t, const timeline& tl) {
  std::vector<bool> not_a_step(t.events.size(), false);
  std::set<std::pair<uint32_t, int64_t>> pulls;  // (actor, tick) of pull_msg sends
  for (const auto& e : t.events) {
    if (e.kind == tape_kind::sent && wire_tag_name(e.type) == "pull_msg")
      pulls.emplace(e.actor, e.tick);
  }
  std::map<uint32_t, std::vector<size_t>> ticks;  // per actor, its step timers by set time
  for (size_t i : tl.order) {
    const auto& e = t.events[i];
    if (e.kind != tape_kind::timer || wire_tag_name(e.type) != "step_tick") continue;
    if (pulls.count({e.actor, e.tick})) not_a_step[i] = true;
    if (e.peer == e.actor && e.sent_ns >= 0) ticks[e.actor].push_back(i);
  }
  for (auto& [actor, v] : ticks) {
    std::stable_sort(v.begin(), v.end(),
                     [&](size_t a, size_t b) { return t.events[a].sent_ns < t.events[b].sent_ns; });
    for (size_t k = 0; k + 1 < v.size(); ++k) {
      const auto& now = t.events[v[k]];
      // Set before this one fired (in ns: a timer set as it fired is its next step).
      if (t.events[v[k + 1]].sent_ns < now.tick / t.header.tick_scale) not_a_step[v[k]] = true;
    }
  }
  return not_a_step;
}

// A transfer, from its send to its receipt (event i), on the run's async tracks (one per
// message type).
void transfer(trace_lines& w, const tape& t, const timeline& tl, const std::vector<int>& pid_of,
              size_t i, const std::string& type) {
  const size_t s = static_cast<size_t>(tl.from[i]);
  const double ts = tl.ts_us[i];
  if (!(ts > tl.ts_us[s])) return;
  // The begin and end events of one async slice: the same fields but the phase and the time.
  nlohmann::ordered_json begin = {
      {"name", "transfer " + type},       {"cat", "transfer"},        {"ph", "b"},        {"id", i},
      {"pid", pid_of[t.events[s].actor]}, {"tid", t.events[s].actor}, {"ts", tl.ts_us[s]}};
  nlohmann::ordered_json end = begin;
  end["ph"] = "e";
  end["ts"] = ts;
  begin["args"] = {{"from", tape_actor_name(t, t.events[s].actor)},
                   {"to", tape_actor_name(t, t.events[i].actor)}};
  w.line(begin);
  w.line(end);
}

// A shard's merge (its send event at ts) closes the fragment's open round.
void close_round(span_lanes& lanes, uint32_t shard, const merge_msg& m, double ts,
                 std::map<std::pair<uint32_t, uint32_t>, double>& round_open) {
  const auto open = round_open.find(std::make_pair(shard, m.fragment));
  if (open == round_open.end()) return;
  std::string who;
  for (uint32_t l : m.learners) who += (who.empty() ? "" : ",") + std::to_string(l);
  lanes.span(
      shard, lane::round, m.fragment,
      "merge v" + std::to_string(m.version) + " (" + std::to_string(m.learners.size()) +
          " learners)",
      open->second, std::max(ts, open->second + 0.001),
      {{"fragment", m.fragment}, {"version", m.version}, {"learners", who}, {"quorum", m.quorum}});
  round_open.erase(open);
}

// What took time, as spans on lanes under each actor's track (one tape, in its own time):
//   - compute: a learner's inner step, from when its step timer was set to when it fired (in
//     real time, from its step timer to its next event: the step is computed in between);
//   - down: an actor's process from its kill to its restart (or the tape's end);
//   - rounds of fragment f: a shard's round, from the first delta of the round to its merge
//     (the merge_msg the shard sent, named by the version it made and its learners);
//   - grace of fragment f: a round's grace window, from when the shard first armed it to when
//     it ended: its earliest timer, or the merge when that came first (a window moved earlier
//     sets a second timer, and one that fires after its round merged shows nothing);
// and, on the run's async tracks, every transfer from its send to its receipt.
void spans(trace_lines& w, const tape& t, const timeline& tl, const std::vector<int>& pid_of) {
  using json = nlohmann::ordered_json;
  span_lanes lanes(w, t, pid_of);
  // A time in nanoseconds of event i's host clock (a timer's set time), on the timeline.
  auto at_ns = [&](size_t i, int64_t ns) {
    return micros_number(t, tl.shifted(i, ns * t.header.tick_scale), tl.origin);
  };
  const size_t n = t.header.roles.size();
  std::vector<double> down_since(n, -1);
  // Per shard and fragment: the round's first delta.
  std::map<std::pair<uint32_t, uint32_t>, double> round_open;
  const auto merges = merges_by_send(t, tl);
  const auto next_of = next_event_us(t, tl);
  const auto not_a_step = timers_not_a_step(t, tl);
  // Grace windows by (shard, fragment, round): when first armed; and the merges' times by
  // (shard, fragment), in order.
  using round_key = std::tuple<uint32_t, uint32_t, uint64_t>;
  std::map<round_key, double> armed;
  std::set<round_key> grace_drawn;
  std::map<std::pair<uint32_t, uint32_t>, std::vector<double>> merged_at;
  for (size_t i = 0; i < t.events.size(); ++i) {
    const auto& e = t.events[i];
    if (e.kind != tape_kind::timer || e.peer != e.actor || e.sent_ns < 0) continue;
    if (auto g = decoded<grace_tick>(t, e)) {
      const double set = at_ns(i, e.sent_ns);
      auto [it, fresh] = armed.emplace(round_key{e.actor, g->fragment, g->round}, set);
      if (!fresh) it->second = std::min(it->second, set);
    }
  }
  for (size_t i : tl.order) {
    const auto& e = t.events[i];
    const double ts = tl.ts_us[i];
    const std::string type = wire_tag_name(e.type);
    const bool received = e.kind == tape_kind::message || e.kind == tape_kind::dropped;
    if (not_a_step[i]) {
      // neither an inner step nor anything else worth a span
    } else if (e.kind == tape_kind::timer && type == "step_tick" && !t.header.virtual_time) {
      lanes.span(e.actor, lane::compute, 0, "inner step", ts, next_of[i], json::object());
    } else if (e.kind == tape_kind::timer && e.peer == e.actor && e.sent_ns >= 0) {
      const double set = at_ns(i, e.sent_ns);
      if (type == "step_tick") {
        lanes.span(e.actor, lane::compute, 0, "inner step", set, ts, json::object());
      } else if (auto g = decoded<grace_tick>(t, e)) {
        const round_key key{e.actor, g->fragment, g->round};
        if (grace_drawn.insert(key).second) {
          const double from = armed.count(key) != 0 ? armed[key] : set;
          double to = ts;
          const auto& done = merged_at[std::make_pair(e.actor, g->fragment)];
          const auto first = std::lower_bound(done.begin(), done.end(), from);
          if (first != done.end()) to = std::min(to, *first);
          if (to > from) {
            lanes.span(e.actor, lane::grace, g->fragment,
                       "grace window, round " + std::to_string(g->round), from, to,
                       {{"fragment", g->fragment}, {"round", g->round}});
          }
        }
      }
    }
    if (received && type == "kill_msg" && down_since[e.actor] < 0) down_since[e.actor] = ts;
    if (received && type == "restart_msg" && down_since[e.actor] >= 0) {
      lanes.span(e.actor, lane::down, 0, "down", down_since[e.actor], ts, json::object());
      down_since[e.actor] = -1;
    }
    if (e.kind == tape_kind::message && type == "outer_gradient_msg") {
      if (auto g = decoded<outer_gradient_msg>(t, e))
        round_open.emplace(std::make_pair(e.actor, g->fragment), ts);  // kept if already open
    }
    if (e.kind == tape_kind::sent) {
      if (auto m = merges.find(i); m != merges.end()) {
        close_round(lanes, e.actor, m->second, ts, round_open);
        merged_at[std::make_pair(e.actor, m->second.fragment)].push_back(ts);
      }
    }
    if (tl.from[i] >= 0 && e.kind == tape_kind::message) transfer(w, t, tl, pid_of, i, type);
  }
  // Still down at the tape's end.
  const double end = tl.order.empty() ? 0 : tl.ts_us[tl.order.back()];
  for (uint32_t a = 0; a < n; ++a) {
    if (down_since[a] >= 0)
      lanes.span(a, lane::down, 0, "down (to the end)", down_since[a], end, json::object());
  }
}

}  // namespace

std::string chrome_trace_json(const tape& t, bool logical) {
  using json = nlohmann::ordered_json;
  const timeline tl = lay_out(t, logical);
  char id[24];
  std::snprintf(id, sizeof id, "%016" PRIx64, t.header.run_id);
  const std::string clock = !tl.clock_note.empty()  ? tl.clock_note
                            : t.header.virtual_time ? "simulated"
                                                    : "the host's";
  trace_lines w;
  w.out = json{{"displayTimeUnit", "ms"}, {"otherData", {{"run_id", id}, {"clock", clock}}}}.dump();
  w.out.pop_back();  // the closing brace: the event list follows
  w.out += ",\"traceEvents\":[\n";
  std::vector<std::string> nodes;
  const std::vector<int> pid_of = node_pids(t, nodes);
  name_tracks(w, t, nodes, pid_of, id);
  event_slices(w, t, tl, pid_of);
  // Spans need one clock (not Lamport time).
  if (!tl.logical) spans(w, t, tl, pid_of);
  w.out += "\n]}\n";
  return std::move(w.out);
}

std::string shiviz_log(const tape& t) {
  // Vector clocks by Fidge's rules over what the tape shows (every logged event ticks its
  // actor; a receipt first merges its send's clock), so ShiViz's checks hold by construction.
  // The events go out in a causal order (lay_out): a deployed run's nodes on one log.
  const timeline tl = lay_out(t);
  const size_t n = t.header.roles.size();
  std::vector<std::vector<uint64_t>> local(n, std::vector<uint64_t>(n, 0));
  std::vector<std::vector<uint64_t>> at(t.events.size());
  auto host = [&](uint32_t actor, size_t event) {
    const std::string node = node_of(t, event);
    return (node.empty() ? "" : node + ":") + host_name(t, actor);
  };
  // A host's name is the node that records the actor (the clock's keys name the same hosts).
  std::vector<std::string> name(n);
  for (uint32_t a = 0; a < n; ++a) name[a] = host_name(t, a);
  for (size_t i = 0; i < t.events.size(); ++i) name[t.events[i].actor] = host(t.events[i].actor, i);
  std::string out = "(?<event>.*)\\n(?<host>\\S*) (?<clock>{.*})\n\n";
  for (size_t i : tl.order) {
    const auto& e = t.events[i];
    auto& mine = local[e.actor];
    if (tl.from[i] >= 0) {
      const auto& theirs = at[static_cast<size_t>(tl.from[i])];
      for (size_t k = 0; k < n && k < theirs.size(); ++k) mine[k] = std::max(mine[k], theirs[k]);
    }
    mine[e.actor] += 1;
    if (e.kind == tape_kind::sent) at[i] = mine;
    std::string what = to_string(e.kind);
    what += " " + wire_tag_name(e.type);
    if (e.kind == tape_kind::sent) what += " to " + tape_actor_name(t, e.peer);
    if ((e.kind == tape_kind::message || e.kind == tape_kind::dropped) && !e.clock.empty())
      what += " from " + tape_actor_name(t, e.peer);
    // Simulated time from 0; a deployed run's real time from its first event, with the host's
    // own clock beside it.
    const int64_t from = tl.shift.empty() ? 0 : tl.origin;
    if (tl.logical)
      what += " (host clock " + std::to_string(e.tick) + " ns)";
    else
      what += " at " + micros(t, tl.shifted(i, e.tick), from) + " us" +
              (tl.shift.empty() ? "" : " (host clock " + std::to_string(e.tick) + " ns)");
    if (e.kind == tape_kind::timer && e.peer == e.actor && e.sent_ns >= 0 && !tl.logical)
      what += ", set at " + micros(t, tl.shifted(i, e.sent_ns * t.header.tick_scale), from) + " us";
    nlohmann::ordered_json clock = nlohmann::ordered_json::object();
    for (size_t k = 0; k < n; ++k) {
      if (mine[k] != 0) clock[name[k]] = mine[k];
    }
    out += what + "\n" + name[e.actor] + " " + clock.dump() + "\n";
  }
  return out;
}

}  // namespace diloco
