// Tape exports checked against what their viewers require: Chrome's trace event format (a
// traceEvents array; every event with name, ph, pid, tid; complete events with ts and dur;
// each flow start with a finish of the same id, not earlier) and ShiViz's log (the regular
// expression first, then description and "host {clock}" line pairs whose clocks obey the
// vector-clock rules ShiViz checks).
#include <algorithm>
#include "tests/catch.hpp"
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "observe/tape_export.hpp"
#include "hosts/simulation.hpp"
#include "protocol/wire.hpp"
#include "tests/hosts/small_runs.hpp"
#include "tests/temp_dir.hpp"

using namespace diloco;
using json = nlohmann::json;

namespace {

run_config export_config() {
  run_config c = testing::chaos_config();
  c.token_budget = 5 * 16 * 200;
  c.inner.total_steps = c.steps_per_learner();
  return c;
}

tape recorded_tape(const testing::temp_dir& dir, const run_config& c = export_config()) {
  const std::string path = dir.file("run.tape");
  auto rec = tape_recorder::create(path, make_tape_header(c, 3, "", true));
  REQUIRE(rec.ok());
  sim_options o;
  o.tape = *rec;
  REQUIRE(run_simulation(c, o).ok());
  REQUIRE((*rec)->close().ok());
  auto t = read_tape(path);
  REQUIRE(t.ok());
  return std::move(*t);
}

}  // namespace

TEST_CASE("tape export: Chrome trace events have the required fields and matched flows") {
  testing::temp_dir dir;
  const tape t = recorded_tape(dir);
  const json doc = json::parse(chrome_trace_json(t));
  REQUIRE(doc.contains("traceEvents"));
  const auto& events = doc["traceEvents"];
  REQUIRE(events.is_array());
  std::set<int64_t> named_threads;
  std::map<int64_t, double> flow_start, flow_end, async_begin, async_end;
  size_t complete = 0;
  for (const auto& e : events) {
    REQUIRE(e.contains("name"));
    REQUIRE(e.contains("ph"));
    REQUIRE(e.contains("pid"));
    REQUIRE(e.contains("tid"));
    const std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "thread_name") {
        CHECK(e["args"]["name"].is_string());
        if (e["tid"].get<int64_t>() < static_cast<int64_t>(t.header.roles.size()))
          named_threads.insert(e["tid"].get<int64_t>());
      }
      continue;
    }
    REQUIRE(e.contains("ts"));
    CHECK(e["ts"].is_number());
    CHECK(e["ts"].get<double>() >= 0);
    if (ph == "X") {
      REQUIRE(e.contains("dur"));
      CHECK(e["dur"].get<double>() > 0);
      complete += e["cat"] != "span";
    } else if (ph == "b" || ph == "e") {
      REQUIRE(e.contains("id"));
      CHECK(e["cat"] == "transfer");
      (ph == "b" ? async_begin : async_end)[e["id"].get<int64_t>()] = e["ts"].get<double>();
    } else if (ph == "s") {
      REQUIRE(e.contains("id"));
      flow_start[e["id"].get<int64_t>()] = e["ts"].get<double>();
    } else if (ph == "f") {
      REQUIRE(e.contains("id"));
      CHECK(e["bp"] == "e");
      flow_end[e["id"].get<int64_t>()] = e["ts"].get<double>();
    } else {
      FAIL("unexpected phase " << ph);
    }
  }
  CHECK(complete == t.events.size());  // one slice per tape event
  CHECK(named_threads.size() == t.header.roles.size());
  REQUIRE(flow_start.size() == flow_end.size());
  CHECK(flow_start.size() > 100);
  for (const auto& [id, ts] : flow_start) {
    REQUIRE(flow_end.count(id) == 1);
    CHECK(flow_end[id] >= ts);  // a message arrives after it was sent
  }
  // Transfers: every begin has its end, later.
  CHECK(async_begin.size() > 100);
  REQUIRE(async_begin.size() == async_end.size());
  for (const auto& [id, ts] : async_begin) {
    REQUIRE(async_end.count(id) == 1);
    CHECK(async_end[id] > ts);
  }
}

TEST_CASE("tape export: spans show where the time went, one lane each, never overlapping") {
  testing::temp_dir dir;
  run_config c = export_config();
  c.shard_restarts = {shard_restart_event{1, 150.0, 20.0}};  // within the run
  const tape t = recorded_tape(dir, c);
  const json doc = json::parse(chrome_trace_json(t));
  std::map<std::pair<int64_t, int64_t>, std::string> lane_names;  // (pid, tid) -> name
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<double, double>>> lanes;
  std::map<std::string, size_t> by_name;
  double steps_us = 0, end_us = 0;
  size_t steps = 0;
  for (const auto& e : doc["traceEvents"]) {
    const auto key = std::make_pair(e["pid"].get<int64_t>(), e["tid"].get<int64_t>());
    if (e["ph"] == "M" && e["name"] == "thread_name") lane_names[key] = e["args"]["name"];
    if (e["ph"] == "X") end_us = std::max(end_us, e["ts"].get<double>());
    if (e["ph"] != "X" || e["cat"] != "span") continue;
    const double ts = e["ts"], dur = e["dur"];
    lanes[key].emplace_back(ts, ts + dur);
    const std::string name = e["name"];
    by_name[name.substr(0, name.find(' ', name.find(' ') + 1))] += 1;
    if (name == "inner step") steps_us += dur, ++steps;
  }
  // Each lane is named after its actor and what it shows, and its spans do not overlap (the
  // viewers need them nested).
  for (auto& [key, spans] : lanes) {
    REQUIRE(lane_names.count(key) == 1);
    std::sort(spans.begin(), spans.end());
    for (size_t k = 1; k < spans.size(); ++k) CHECK(spans[k].first >= spans[k - 1].second - 1e-6);
  }
  std::set<std::string> kinds;
  for (const auto& [key, name] : lane_names) {
    const auto colon = name.find(": ");
    if (colon != std::string::npos) kinds.insert(name.substr(colon + 2, 6));
  }
  CHECK(kinds == std::set<std::string>{"comput", "down", "grace ", "rounds"});
  // Inner steps: one per step timer the tape saw set, each about the nominal step time (the
  // learners here run at nominal speed with jitter; chaos may slow one).
  size_t step_timers = 0;
  for (const auto& e : t.events)
    step_timers += e.kind == tape_kind::timer && wire_tag_name(e.type) == "step_tick";
  CHECK(steps > 0);
  CHECK(steps <= step_timers);
  // All but a few: a rejoining learner's reminders to ask again for its fragments, and timers
  // a later one superseded, are not steps.
  CHECK(steps * 10 >= step_timers * 9);
  const double mean_step_s = steps_us / static_cast<double>(steps) * 1e-6;
  CHECK(mean_step_s > 0.5 * c.speed.step_time_s);
  CHECK(mean_step_s < 2.0 * c.speed.step_time_s);
  // Rounds up to their merges, grace windows, and the killed learner's and restarted shard's
  // outages.
  size_t merges = 0;
  for (const auto& [name, n] : by_name) merges += name.rfind("merge v", 0) == 0 ? n : 0;
  CHECK(merges > 50);
  CHECK(by_name["grace window,"] > 0);
  bool learner_down = false, shard_down = false;
  for (const auto& [key, name] : lane_names) {
    learner_down = learner_down || (name == "learner 2: down" && !lanes[key].empty());
    shard_down = shard_down || (name == "shard 1: down" && !lanes[key].empty());
  }
  CHECK(learner_down);
  CHECK(shard_down);
  // Each outage lasts what the chaos actor gave it: a random interruption's recovery (30 s),
  // the scripted failure's 40 s, the shard's 20 s (a kill that finds the process already down
  // changes nothing), or it runs to the end.
  for (const auto& [key, name] : lane_names) {
    if (name.size() < 6 || name.substr(name.size() - 6) != ": down") continue;
    for (const auto& [a, b] : lanes[key]) {
      INFO(name << ": " << a * 1e-6 << " .. " << b * 1e-6 << " s");
      const double s = (b - a) * 1e-6;
      const bool expected = std::fabs(s - c.interruptions.recovery_s) < 1e-3 ||
                            std::fabs(s - c.failures[0].down_s) < 1e-3 ||
                            std::fabs(s - c.shard_restarts[0].down_s) < 1e-3 ||
                            std::fabs(b - end_us) < 1e-6;
      CHECK(expected);
    }
  }
}

TEST_CASE("tape export: the ShiViz log parses with its own regex and its clocks are consistent") {
  testing::temp_dir dir;
  const tape t = recorded_tape(dir);
  std::istringstream in(shiviz_log(t));
  std::string regex_line, delimiter;
  std::getline(in, regex_line);
  std::getline(in, delimiter);
  CHECK(regex_line == "(?<event>.*)\\n(?<host>\\S*) (?<clock>{.*})");
  CHECK(delimiter.empty());
  const std::regex host_line(R"(^(\S+) (\{.*\})$)");
  std::map<std::string, std::map<std::string, uint64_t>> last;  // host -> its last clock
  std::string description, line;
  size_t events = 0;
  while (std::getline(in, description)) {
    REQUIRE(std::getline(in, line));
    std::smatch m;
    REQUIRE(std::regex_match(line, m, host_line));
    const std::string host = m[1];
    const json clock = json::parse(m[2].str());
    REQUIRE(clock.is_object());
    REQUIRE(clock.contains(host));  // an event's own host is in its clock
    const uint64_t own = clock[host];
    auto& prev = last[host];
    CHECK(own == prev[host] + 1);  // each event of a host ticks it exactly once
    for (const auto& [k, v] : clock.items()) {
      CHECK(v.get<uint64_t>() >= prev[k]);  // clocks never go back
      prev[k] = v.get<uint64_t>();
    }
    ++events;
  }
  CHECK(events == t.events.size());
  CHECK(last.size() == t.header.roles.size());
  // Hosts learn of each other through messages: some learner has heard from a shard.
  bool heard = false;
  for (const auto& [k, v] : last["learner-0"]) heard = heard || k.rfind("shard", 0) == 0;
  CHECK(heard);
}
