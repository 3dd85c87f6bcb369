// The chaos role on its own: scripted learner failures and shard restarts reach the right
// slots at the right virtual times with the right process numbers, membership changes join
// and leave learners, and the uptime and chip-time accounting matches the schedule.
#include <catch2/catch.hpp>
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
    };
  }));
}

struct chaos_run {
  std::vector<std::shared_ptr<event_log>> learners;
  std::shared_ptr<event_log> shard = std::make_shared<event_log>();
  supervisor_report report;
};

// Starts chaos on `c` with recorders on every learner and shard slot, lets every timer fire,
// stops it and takes its report.
chaos_run run_chaos(const run_config& c) {
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
  fx.drain();
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
