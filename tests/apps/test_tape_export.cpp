// Tape exports checked against what their viewers require: Chrome's trace event format (a
// traceEvents array; every event with name, ph, pid, tid; complete events with ts and dur;
// each flow start with a finish of the same id, not earlier) and ShiViz's log (the regular
// expression first, then description and "host {clock}" line pairs whose clocks obey the
// vector-clock rules ShiViz checks).
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "apps/tape_export.hpp"
#include "hosts/simulation.hpp"
#include "tests/hosts/small_runs.hpp"
#include "tests/temp_dir.hpp"

using namespace diloco;
using json = nlohmann::json;

namespace {

tape recorded_tape(const testing::temp_dir& dir) {
  run_config c = testing::chaos_config();
  c.token_budget = 5 * 16 * 200;
  c.inner.total_steps = c.steps_per_learner();
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
  std::map<int64_t, double> flow_start, flow_end;
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
      ++complete;
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
