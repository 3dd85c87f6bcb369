// The cost-model learner on its own, against a stand-in shard: it wakes when a fragment falls
// due on the shared schedule and sends that fragment's outer gradient, carrying the steps its
// speed model did since the fragment's last send, the step and the mixing deadline; an
// elastic pause and a reduced share of chips slow that work as the model says; at the stop it
// sends each fragment's final delta; a malformed schedule or capacity is refused and counted.
#include "tests/catch.hpp"
#include <cstdint>
#include <vector>

#include "actors/cost_learner.hpp"
#include "tests/actors/sim_fixture.hpp"

using namespace diloco;

namespace {

constexpr int64_t ms = 1000000;

run_config cost_config() {
  run_config c = testing::tiny_config(1, 1, 2);
  c.compute = compute_mode::cost;
  c.batch = 8;
  c.speed.step_time_s = 0.001;
  c.duration_s = 1.0;
  c.link.latency_s = 0.0;  // the stop comes right after the delta that triggers it
  return c;
}

struct sent {
  uint32_t fragment;
  uint64_t send_step, steps, tokens;
  int64_t deadline_ns;
  bool final;
  bool operator==(const sent& o) const {
    return fragment == o.fragment && send_step == o.send_step && steps == o.steps &&
           tokens == o.tokens && deadline_ns == o.deadline_ns && final == o.final;
  }
};

std::ostream& operator<<(std::ostream& os, const sent& s) {
  return os << "{fragment " << s.fragment << ", step " << s.send_step << ", steps " << s.steps
            << ", deadline " << s.deadline_ns << (s.final ? ", final}" : "}");
}

struct run_result {
  std::vector<sent> deltas;
  learner_report report;
};

// H = 4, tau = 1, fragment 0 due at steps 0 mod 4 and fragment 1 at 2 mod 4, 1 ms a step.
// `before` goes to the learner before the schedule; the stand-in shard stops the learner once
// it has `limit` deltas.
template <class... Msgs>
run_result run_cost_learner(size_t limit, Msgs... before) {
  testing::sim_fixture fx;
  auto env = actor_env::make(cost_config(), true);
  INFO((env.ok() ? std::string() : env.error().to_string()));
  REQUIRE(env.ok());
  auto dir = fx.sink_directory(**env);
  const directory_ptr wiring = dir;
  run_result r;
  auto stand_in =
      fx.own(fx.sys().spawn([&r, wiring, limit](caf::event_based_actor* self) -> caf::behavior {
        testing::ignore_unhandled(self);
        return {[&r, wiring, limit, self](outer_gradient_msg& m) {
          CHECK(m.delta.size() == 0);  // no values: only the modelled size
          CHECK(m.step_time_ns == ms);
          r.deltas.push_back({m.fragment, m.send_step, m.steps, m.tokens, m.deadline_ns, m.final});
          if (r.deltas.size() == limit) self->send(wiring->learners[0], stop_msg{});
        }};
      }));
  dir->shards[0] = caf::actor_cast<shard_actor>(stand_in);
  auto l = fx.own(fx.sys().spawn(cost_learner, *env, 0u, wiring));
  dir->learners[0] = l;
  caf::anon_send(l, start_msg{});
  fx.own(fx.sys().spawn([l, before...](caf::event_based_actor* self) {
    (self->send(l, before), ...);
    self->send(l, schedule_msg{stamp{}, 4, 1, {0, 2}, true, 0, ms});
  }));
  fx.drain();
  fx.own(fx.sys().spawn([&r, l](caf::event_based_actor* self) {
    self->request(l, std::chrono::seconds(1), report_request{}).then([&r](learner_report rep) {
      r.report = rep;
    });
  }));
  fx.drain();
  return r;
}

sent delta(uint32_t p, uint64_t step, uint64_t steps, bool final = false) {
  return sent{p, step, steps, 8 * steps, (static_cast<int64_t>(step) + 1) * ms, final};
}

}  // namespace

TEST_CASE("cost learner: each fragment's delta at its due step with the work since its last") {
  const auto r = run_cost_learner(4);
  // Fragment 1 first (due at step 2, two steps of work); fragment 0 is not due at step 0.
  // Stopped at 8 ms: fragment 0 sent at 8 has no work left, fragment 1 has steps 6 to 8.
  CHECK(r.deltas == std::vector<sent>{delta(1, 2, 2), delta(0, 4, 4), delta(1, 6, 4),
                                      delta(0, 8, 4), delta(0, 8, 0, true), delta(1, 8, 2, true)});
  CHECK(r.report.steps == 8);
  // Busy until the stop came: the last delta's transfer time after 8 ms, less than a step.
  CHECK(r.report.busy_ns >= 8 * ms);
  CHECK(r.report.busy_ns < 9 * ms);
  CHECK(r.report.rejected_messages == 0);
}

TEST_CASE("cost learner: an elastic pause and half the chips slow the modelled work") {
  // Paused for the first 2 ms, then a step takes 2 ms.
  const auto r = run_cost_learner(4, capacity_msg{stamp{}, 0.5, 2 * ms});
  CHECK(r.deltas == std::vector<sent>{delta(1, 2, 0), delta(0, 4, 1), delta(1, 6, 2),
                                      delta(0, 8, 2), delta(0, 8, 0, true), delta(1, 8, 1, true)});
  CHECK(r.report.steps == 3);
  CHECK(r.report.busy_ns >= 6 * ms);  // not while paused
  CHECK(r.report.busy_ns < 7 * ms);
}

TEST_CASE("cost learner: a malformed schedule or capacity is refused and counted") {
  const auto r = run_cost_learner(2, schedule_msg{stamp{}, 0, 1, {0, 2}, true, 0, ms},  // H = 0
                                  schedule_msg{stamp{}, 4, 1, {0}, true, 0, ms},    // one offset
                                  schedule_msg{stamp{}, 4, 1, {0, 2}, true, 0, 0},  // no step time
                                  capacity_msg{stamp{}, 1.5, 0}, capacity_msg{stamp{}, 0.5, -1});
  CHECK(r.report.rejected_messages == 5);
  // The valid schedule after them runs as usual.
  REQUIRE(r.deltas.size() == 4);
  CHECK(r.deltas[0] == delta(1, 2, 2));
  CHECK(r.deltas[1] == delta(0, 4, 4));
}

TEST_CASE("progress meter: a report takes whole steps and keeps the fraction for the next") {
  progress_meter m;
  m.steps = 2.75;  // the cost model counts fractional steps
  m.add_busy(2000000000, 4.0);
  m.idle_ns = 5;
  m.add_gap(0.25);
  m.add_gap(-0.05);
  progress_msg msg;
  m.take(msg);
  CHECK(msg.steps == 2);
  CHECK(msg.busy_ns == 2000000000);
  CHECK(msg.chip_s == Approx(8.0));
  CHECK(msg.idle_ns == 5);
  CHECK(msg.train_loss == 0.0);  // no step computed a loss
  CHECK(msg.merge_gap_sum == Approx(0.20));
  CHECK(msg.merge_gaps == 2);
  CHECK(m.steps == Approx(0.75));
  CHECK(m.busy_ns == 0);
  CHECK(m.gaps == 0);
  // Whole steps with losses: the report carries their mean and their tokens.
  m = progress_meter{};
  m.add_step(64, 2.0);
  m.add_step(32, 1.0);
  m.take(msg);
  CHECK(msg.steps == 2);
  CHECK(msg.tokens == 96);
  CHECK(msg.train_loss == Approx(1.5));
  CHECK(m.steps == 0.0);
  CHECK(m.tokens == 0);
}
