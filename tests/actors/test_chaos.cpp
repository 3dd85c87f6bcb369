// The chaos role on its own: scripted learner failures and shard restarts reach the right
// slots at the right virtual times with the right process numbers, membership changes join
// and leave learners, and the uptime and chip-time accounting matches the schedule.
#include "tests/catch.hpp"
#include <cstdio>
#include <string>

#include "actors/chaos.hpp"
#include "tests/actors/sim_fixture.hpp"

using namespace diloco;

namespace {

run_config chaos_config() {
  return testing::tiny_config(2, 1, 1);
}

using event_log = std::vector<std::string>;

// Writes "kind incarnation @ms" for every supervision message a slot gets.
caf::actor recorder(testing::sim_fixture& fx, std::shared_ptr<event_log> log) {
  auto at = [](const stamp& st) { return " @" + std::to_string(st.sent_at_ns / 1000000); };
  return fx.own(fx.sys().spawn([log, at](caf::event_based_actor* self) -> caf::behavior {
    testing::ignore_unhandled(self);
    return {
        [=](kill_msg& m) { log->push_back("kill" + at(m.st)); },
        [=](restart_msg& m) {
          log->push_back("restart " + std::to_string(m.incarnation) + at(m.st));
        },
        [=](peer_msg& m) {
          log->push_back("peer " + std::to_string(m.shard) + "." + std::to_string(m.incarnation) +
                         at(m.st));
        },
        [=](leave_msg& m) { log->push_back("leave" + at(m.st)); },
        [=](capacity_msg& m) {
          log->push_back("capacity " + std::to_string(m.capacity) + " pause " +
                         std::to_string(m.pause_ns) + at(m.st));
        },
    };
  }));
}

struct chaos_run {
  std::vector<std::shared_ptr<event_log>> learners;
  std::shared_ptr<event_log> shard = std::make_shared<event_log>();
  supervisor_report report;
};

// Starts chaos on `c` with recorders on every learner and shard slot, lets every timer fire (at
// most `timeouts` of them), stops it and takes its report.
chaos_run run_chaos(const run_config& c, size_t timeouts = SIZE_MAX) {
  testing::sim_fixture fx;
  auto env = actor_env::make(c, true);
  REQUIRE(env.ok());
  auto dir = fx.sink_directory(**env);
  chaos_run r;
  for (uint32_t i = 0; i < (*env)->ids.learners; ++i) {
    r.learners.push_back(std::make_shared<event_log>());
    dir->learners[i] = caf::actor_cast<learner_actor>(recorder(fx, r.learners.back()));
  }
  dir->shards[0] = caf::actor_cast<shard_actor>(recorder(fx, r.shard));
  auto sup = fx.own(fx.sys().spawn(chaos, *env, directory_ptr(dir)));
  dir->chaos = sup;
  caf::anon_send(sup, start_msg{});
  fx.drain(timeouts);
  fx.own(fx.sys().spawn([sup, &r](caf::event_based_actor* self) {
    self->send(sup, stop_msg{});
    self->request(sup, std::chrono::seconds(10), report_request{})
        .then([&r](supervisor_report rep) { r.report = rep; });
  }));
  fx.drain();
  return r;
}

}  // namespace

TEST_CASE("chaos: a scripted learner failure and a shard restart, at their times, in order") {
  run_config c = chaos_config();
  c.failures = {failure_event{0, 1.0, 2.0}};
  c.shard_restarts = {shard_restart_event{0, 1.5, 1.0}};
  const chaos_run r = run_chaos(c);
  // Learner 0 is down from 1 s to 3 s, so only learner 1 hears of the shard's new process.
  CHECK(*r.learners[0] == event_log{"kill @1000", "restart 1 @3000"});
  CHECK(*r.learners[1] == event_log{"peer 0.1 @2500"});
  CHECK(*r.shard == event_log{"kill @1500", "restart 1 @2500"});
  CHECK(r.report.kills == 1);
  CHECK(r.report.restarts == 1);
  CHECK(r.report.shard_restarts == 1);
  CHECK(r.report.interruptions == 0);
  // Watched 3 s; learner 1 computed throughout; 2 of the 6 provisioned chip-seconds were down.
  CHECK(r.report.observed_s == Approx(3.0));
  CHECK(r.report.uptime_s == Approx(3.0));
  CHECK(r.report.provisioned_chip_s == Approx(6.0));
  CHECK(r.report.computing_chip_s == Approx(4.0));
  CHECK(r.report.learners.size() == 2);  // both up at the end
}

TEST_CASE("chaos: uptime counts only the time some learner computes") {
  run_config c = chaos_config();
  // Both down together from 2 s to 3 s; learner 0 again from 4 s to 5 s.
  c.failures = {failure_event{0, 1.0, 2.0}, failure_event{1, 2.0, 1.0}, failure_event{0, 4.0, 1.0}};
  const chaos_run r = run_chaos(c);
  CHECK(*r.learners[0] ==
        event_log{"kill @1000", "restart 1 @3000", "kill @4000", "restart 2 @5000"});
  CHECK(*r.learners[1] == event_log{"kill @2000", "restart 1 @3000"});
  CHECK(r.report.kills == 3);
  CHECK(r.report.observed_s == Approx(5.0));
  CHECK(r.report.uptime_s == Approx(4.0));
  CHECK(r.report.computing_chip_s == Approx(10.0 - 2.0 - 1.0 - 1.0));
}

TEST_CASE("chaos: a failure of a learner that is already down is part of the same outage") {
  run_config c = chaos_config();
  c.failures = {failure_event{0, 1.0, 3.0}, failure_event{0, 2.0, 0.5}};
  const chaos_run r = run_chaos(c);
  CHECK(*r.learners[0] == event_log{"kill @1000", "restart 1 @4000"});
  CHECK(r.report.kills == 1);
  CHECK(r.report.restarts == 1);
}

TEST_CASE("chaos: spare capacity joins and a learner leaves") {
  run_config c = chaos_config();
  c.max_learners = 3;  // one spare slot
  c.membership = {membership_event{2, 1.0, true}, membership_event{0, 2.0, false}};
  const chaos_run r = run_chaos(c);
  CHECK(*r.learners[2] == event_log{"restart 0 @1000"});
  CHECK(*r.learners[0] == event_log{"leave @2000"});
  CHECK(r.learners[1]->empty());
  // Provisioned: learner 0 for 2 s, learner 1 for 2 s, learner 2 for 1 s.
  CHECK(r.report.observed_s == Approx(2.0));
  CHECK(r.report.provisioned_chip_s == Approx(5.0));
  REQUIRE(r.report.learners.size() == 2);
}

TEST_CASE("chaos: an elastic learner is told a working share and a pause it can take") {
  run_config c = chaos_config();
  c.chips_per_learner = 128;
  c.interruptions.elastic = true;
  c.interruptions.unit_chips = 64;
  c.interruptions.mtbi_hours = 128.0 / 3600;  // a learner fails about once a second
  c.interruptions.rescale_s = 0.25;
  c.interruptions.recovery_s = 1.5;
  const chaos_run r = run_chaos(c, 400);
  size_t shrinks = 0, grows = 0;
  for (const auto& log : r.learners) {
    double share = 1.0;
    for (const auto& line : *log) {
      double capacity = 0;
      long long pause = 0;
      REQUIRE(std::sscanf(line.c_str(), "capacity %lf pause %lld", &capacity, &pause) == 2);
      INFO(line);
      // What the learner accepts (capacity_valid): a share in [0, 1], a pause not negative.
      CHECK(capacity >= 0.0);
      CHECK(capacity <= 1.0);
      CHECK(pause >= 0);
      (capacity < share ? shrinks : grows) += 1;
      share = capacity;
    }
  }
  CHECK(r.report.interruptions > 20);
  CHECK(r.report.rescales > 0);
  CHECK(shrinks > 10);
  CHECK(grows > 10);  // repaired units are taken back
}
