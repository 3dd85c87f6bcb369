// Whole clusters in one process on virtual time: determinism, learning, failures, waiting.
// A small model keeps each run to a fraction of a second.
#include <cmath>
#include <cstring>
#include "tests/catch.hpp"

#include "actors/dp_learner.hpp"
#include "hosts/harness.hpp"
#include "hosts/simulation.hpp"
#include "runtime/observer.hpp"
#include "tests/hosts/small_runs.hpp"

using namespace diloco;
using diloco::testing::fast_config;

namespace {

bool same_params(const float_buffer& a, const float_buffer& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

namespace {

// Invariant violations as a matcher: a failure prints each violated invariant.
struct NoViolations : Catch::MatcherBase<std::vector<std::string>> {
  bool match(const std::vector<std::string>& v) const override { return v.empty(); }
  std::string describe() const override { return "holds every invariant"; }
};

}  // namespace

TEST_CASE("simulation: the same seed gives a bit-identical run, another seed another run") {
  const run_config c = fast_config();
  auto a = run_simulation(c), b = run_simulation(c);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(same_params(a->params, b->params));
  CHECK(a->eval_loss == b->eval_loss);
  CHECK(a->events == b->events);
  CHECK(a->virtual_s == b->virtual_s);
  REQUIRE(a->learners.size() == b->learners.size());
  for (size_t i = 0; i < a->learners.size(); ++i) {
    CHECK(a->learners[i].steps == b->learners[i].steps);
    CHECK(a->learners[i].bytes_sent == b->learners[i].bytes_sent);
    CHECK(a->learners[i].last_loss == b->learners[i].last_loss);
  }
  run_config other = c;
  other.seed = 2;
  auto d = run_simulation(other);
  REQUIRE(d.ok());
  CHECK_FALSE(same_params(a->params, d->params));
}

TEST_CASE("simulation: Decoupled DiLoCo learns, merges, and no learner ever waits") {
  auto r = run_simulation(fast_config());
  REQUIRE(r.ok());
  CHECK_THAT(check_invariants(*r), NoViolations());
  CHECK(r->run.stopped);
  CHECK(r->run.shards_flushed == 2);
  CHECK(r->tokens() >= fast_config().token_budget);
  CHECK(r->eval_loss < 3.0);  // from log(256) = 5.55 at initialization
  uint64_t merges = 0;
  for (const auto& s : r->shards) {
    merges += s.merges;
    CHECK(s.rejected_messages == 0);
  }
  CHECK(merges > 4 * 600 / 16 / 2);  // every fragment merged many times
  for (const auto& l : r->learners) {
    CHECK(l.idle_ns == 0);
    CHECK(l.late_updates == 0);
    CHECK(l.rejected_messages == 0);
    CHECK(l.steps >= 590);
  }
}

TEST_CASE(
    "simulation: a learner killed mid-run does not stop the others; it rejoins and the run "
    "completes") {
  run_config c = fast_config();
  c.failures = {{1, 150.0, 100.0}};  // virtual seconds; steps take 1 s
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  CHECK(r->supervisor.kills == 1);
  CHECK(r->supervisor.restarts == 1);
  CHECK(r->run.stopped);
  CHECK(r->run.shards_flushed == 2);
  CHECK(r->tokens() >= c.token_budget);
  REQUIRE(r->learners.size() == 4);
  const auto& back = r->learners[1];
  CHECK(back.incarnation == 1);
  // The restarted learner resumed on the shared clock, not at step 0 ...
  CHECK(back.steps > 150);
  for (uint32_t i : {0u, 2u, 3u}) {
    CHECK(r->learners[i].idle_ns == 0);
    // ... and lost the work of its outage, while the others kept going through it.
    CHECK(r->learners[i].tokens > back.tokens + 16 * 90);
  }
  CHECK(r->eval_loss < 3.2);
  auto clean = run_simulation(fast_config());
  REQUIRE(clean.ok());
  CHECK(r->eval_loss < clean->eval_loss * 1.1);
}

TEST_CASE("simulation: synchronous DiLoCo waits for the slowest learner, Decoupled never does") {
  run_config c = fast_config();
  c.speeds = {testing::timing(1.0, 0.0), testing::timing(1.0, 0.0), testing::timing(1.5, 0.1),
              testing::timing(1.5, 0.1)};
  auto sync = run_simulation(as_sync_diloco(c));
  REQUIRE(sync.ok());
  CHECK(sync->learners[0].idle_ns > 0);
  CHECK(sync->learners[1].idle_ns > 0);
  // The fast half waits about a third of its time for the slow half.
  const double fast_idle_share =
      static_cast<double>(sync->learners[0].idle_ns) /
      static_cast<double>(sync->learners[0].idle_ns + sync->learners[0].busy_ns);
  CHECK(fast_idle_share > 0.2);
  auto dec = run_simulation(c);
  REQUIRE(dec.ok());
  for (const auto& l : dec->learners) CHECK(l.idle_ns == 0);
  // Without waiting, the fast learners do more of the budget.
  CHECK(dec->learners[0].steps > dec->learners[2].steps);
}

TEST_CASE("simulation: the data-parallel baseline keeps replicas in lock step") {
  run_config c = as_data_parallel(fast_config());
  c.token_budget = 4 * 16 * 200;
  c.inner.total_steps = c.steps_per_learner();
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  CHECK(r->tokens() >= c.token_budget);
  uint64_t steps = r->learners[0].steps;
  for (const auto& l : r->learners) CHECK(l.steps == steps);  // nobody gets ahead
  CHECK(r->eval_loss < 4.0);
  // Every step moves the whole gradient both ways.
  const auto n = static_cast<double>(r->params.size());
  CHECK(static_cast<double>(r->learners[0].bytes_sent) >
        4.0 * n * 0.9 * static_cast<double>(steps));
}

TEST_CASE(
    "simulation: vanilla DiLoCo with one learner, outer lr 1 and momentum 0 is data parallel") {
  // The global model becomes the learner's model at every outer step (Theta - 1 x (Theta -
  // theta)) and the learner takes it back whole: the same training as data parallel's one
  // replica, to the rounding of that subtraction.
  run_config c = fast_config();
  c.learners = 1;
  c.shards = 1;
  c.token_budget = 16 * 400;
  c.inner.total_steps = c.steps_per_learner();
  c.outer.lr = 1.0;
  c.outer.momentum = 0.0;
  const run_config vanilla = as_vanilla_diloco(c);
  CHECK(vanilla.alpha == 0.0);
  CHECK(vanilla.merge == merge_rule::plain_average);
  CHECK(vanilla.uplink.kind == codec_kind::fp32);
  CHECK(vanilla.downlink == codec_kind::fp32);
  auto v = run_simulation(vanilla);
  auto dp = run_simulation(as_data_parallel(c));
  REQUIRE(v.ok());
  REQUIRE(dp.ok());
  REQUIRE(v->learners[0].steps == dp->learners[0].steps);
  REQUIRE(v->params.size() == dp->params.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < v->params.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(v->params[i] - dp->params[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(dp->params[i])));
  }
  CAPTURE(worst, scale, v->eval_loss, dp->eval_loss);
  CHECK(worst <= 1e-4 * scale);
  CHECK(v->eval_loss == Approx(dp->eval_loss).epsilon(1e-5));
  // The synchronous variant with its int4 codecs only approaches it.
  auto t = run_simulation(as_sync_diloco(c));
  REQUIRE(t.ok());
  double tuned_worst = 0;
  for (size_t i = 0; i < t->params.size(); ++i)
    tuned_worst =
        std::max(tuned_worst, static_cast<double>(std::fabs(t->params[i] - dp->params[i])));
  CAPTURE(tuned_worst);
  CHECK(tuned_worst > 100 * worst);
}

TEST_CASE("simulation: Decoupled DiLoCo (int4, H >= 24) moves 100x fewer bytes per token than DP") {
  run_config c = fast_config();
  c.period_steps = 32;
  c.downlink = codec_kind::int4;
  auto dec = run_simulation(c);
  run_config d = as_data_parallel(fast_config());
  d.token_budget = 4 * 16 * 100;
  d.inner.total_steps = d.steps_per_learner();
  auto dp = run_simulation(d);
  REQUIRE(dec.ok());
  REQUIRE(dp.ok());
  const double dec_per_token =
      static_cast<double>(dec->learner_bytes()) / static_cast<double>(dec->tokens());
  const double dp_per_token =
      static_cast<double>(dp->learner_bytes()) / static_cast<double>(dp->tokens());
  INFO("decoupled " << dec_per_token << " B/token, dp " << dp_per_token << " B/token");
  CHECK(dp_per_token > 100.0 * dec_per_token);
}

TEST_CASE(
    "simulation: with uneven learners, K=1 needs the grace window; without, it degrades "
    "gracefully") {
  run_config c = fast_config();
  c.speeds = {testing::timing(1.0, 0.0), testing::timing(1.0, 0.0), testing::timing(1.18, 0.1),
              testing::timing(1.18, 0.1)};
  c.quorum = 1;
  c.grace = true;
  auto with_grace = run_simulation(c);
  c.grace = false;
  auto without = run_simulation(c);
  c.quorum = 4;
  auto full = run_simulation(c);
  REQUIRE(with_grace.ok());
  REQUIRE(without.ok());
  REQUIRE(full.ok());
  uint64_t merges_grace = 0, merges_without = 0;
  for (const auto& s : with_grace->shards) merges_grace += s.merges;
  for (const auto& s : without->shards) merges_without += s.merges;
  CHECK(merges_without > 2 * merges_grace);  // without grace, rounds fall apart into lone merges
  CHECK(without->eval_loss > with_grace->eval_loss);
  CHECK(with_grace->eval_loss < full->eval_loss * 1.02);
  // Each lone merge moves the global by its share of the round, and the momentum advances once
  // per round: K = 1 without grace loses some quality, it does not diverge.
  REQUIRE(full->entropy_rate > 0);
  const double reducible_full = full->eval_loss - full->entropy_rate;
  INFO("reducible loss: K = M " << reducible_full << ", K = 1 without grace "
                                << without->eval_loss - without->entropy_rate);
  CHECK(std::isfinite(without->eval_loss));
  CHECK(without->eval_loss - without->entropy_rate < 3 * reducible_full);
  for (const auto& l : with_grace->learners) {
    CHECK(l.idle_ns == 0);
    CHECK(l.late_updates == 0);
  }
}

TEST_CASE("simulation: a chaos run repeats exactly: same trace hash, same parameters") {
  run_config c = fast_config();
  c.chips_per_learner = 1000;
  c.interruptions.mtbi_hours = 300.0 * 1000 / 3600.0;  // each learner fails about every 300 s
  c.interruptions.recovery_s = 40;
  auto a = run_simulation(c), b = run_simulation(c);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->supervisor.interruptions > 0);
  CHECK(a->trace_hash == b->trace_hash);
  CHECK(same_params(a->params, b->params));
  CHECK(a->supervisor.interruptions == b->supervisor.interruptions);
  run_config other = c;
  other.seed = 9;
  auto d = run_simulation(other);
  REQUIRE(d.ok());
  CHECK(d->trace_hash != a->trace_hash);
}

TEST_CASE("simulation: another interleaving seed runs the actors in another order") {
  run_config c = fast_config();
  c.token_budget = 4 * 16 * 100;
  c.interleave_seed = 1;
  auto a = run_simulation(c);
  c.interleave_seed = 2;
  auto b = run_simulation(c);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->trace_hash !=
        b->trace_hash);  // the learners' messages reached the shards in another order
  CHECK(a->tokens() == b->tokens());
}

TEST_CASE("simulation: 8 learners with random failures end within 2% of the failure-free run") {
  run_config c = fast_config();
  c.learners = 8;
  c.token_budget = 8 * 16 * 600;
  c.inner.total_steps = c.steps_per_learner();
  auto clean = run_simulation(c);
  c.chips_per_learner = 1000;
  c.interruptions.mtbi_hours = 250.0 * 1000 / 3600.0;  // about two failures per learner per run
  c.interruptions.recovery_s = 30;
  auto failing = run_simulation(c);
  REQUIRE(clean.ok());
  REQUIRE(failing.ok());
  INFO("clean " << clean->eval_loss << ", with failures " << failing->eval_loss << ", "
                << failing->supervisor.interruptions << " interruptions");
  CHECK(failing->supervisor.interruptions >= 8);
  CHECK(failing->supervisor.restarts >= 8);
  CHECK(failing->run.stopped);
  CHECK(failing->run.shards_flushed == 2);
  CHECK(failing->eval_loss < clean->eval_loss * 1.02);
}

// A cost-model run of `learners` learners with `chips` each for `days` simulated days, 10 s
// steps, each chip interrupted once a year on average, a failed learner down for 60 s.
namespace {
run_config cost_run(int learners, uint64_t chips, double days) {
  run_config c = builtin_run_config();
  c.compute = compute_mode::cost;
  c.learners = learners;
  c.chips_per_learner = chips;
  c.duration_s = days * 86400.0;
  c.speed.step_time_s = 10;
  c.interruptions.mtbi_hours = 8760;
  c.interruptions.recovery_s = 60;
  return c;
}
}  // namespace

TEST_CASE("simulation: cost-model goodput follows the renewal formulas of the failure model") {
  run_config c = cost_run(1, 100000, 10);
  auto down = run_simulation(c);
  c.interruptions.elastic = true;
  c.interruptions.rescale_s = 20;
  auto elastic = run_simulation(c);
  REQUIRE(down.ok());
  REQUIRE(elastic.ok());
  const double rate = 100000.0 / (8760.0 * 3600.0);  // failures per second
  // Non-elastic: up Exp(rate), down R: goodput 1 / (1 + rate R). Elastic: pauses of T.
  CHECK(down->goodput() == Approx(1.0 / (1.0 + rate * 60)).epsilon(0.02));
  CHECK(elastic->goodput() == Approx(1.0 / (1.0 + rate * 20)).epsilon(0.02));
  CHECK(down->uptime() == Approx(down->goodput()).epsilon(1e-6));
  // Four elastic learners with a quarter of the chips each: each pauses a quarter as often.
  c.learners = 4;
  c.chips_per_learner = 25000;
  auto decoupled = run_simulation(c);
  REQUIRE(decoupled.ok());
  CHECK(decoupled->goodput() == Approx(1.0 / (1.0 + rate / 4 * 20)).epsilon(0.02));
  CHECK(decoupled->uptime() > 0.999);
}

TEST_CASE("simulation: a run without its trace is the same run, with every trace 0") {
  const run_config c = cost_run(4, 25000, 2);
  auto traced = run_simulation(c);
  sim_options untraced_options;
  untraced_options.trace = false;
  auto untraced = run_simulation(c, untraced_options);
  REQUIRE(traced.ok());
  REQUIRE(untraced.ok());
  CHECK(traced->trace_hash != 0);
  CHECK(untraced->trace_hash == 0);
  // The same events, and the same counts in every actor's report, bit for bit.
  CHECK(untraced->events == traced->events);
  CHECK(untraced->goodput() == traced->goodput());
  CHECK(untraced->uptime() == traced->uptime());
  CHECK(untraced->supervisor.kills == traced->supervisor.kills);
  CHECK(untraced->supervisor.trace == 0);
  REQUIRE(untraced->learners.size() == traced->learners.size());
  for (size_t i = 0; i < traced->learners.size(); ++i) {
    CHECK(untraced->learners[i].messages_sent == traced->learners[i].messages_sent);
    CHECK(untraced->learners[i].bytes_received == traced->learners[i].bytes_received);
    CHECK(untraced->learners[i].trace == 0);
    CHECK(traced->learners[i].trace != 0);
  }
  REQUIRE(untraced->shards.size() == traced->shards.size());
  for (size_t i = 0; i < traced->shards.size(); ++i) {
    CHECK(untraced->shards[i].merges == traced->shards[i].merges);
    CHECK(untraced->shards[i].versions == traced->shards[i].versions);
    CHECK(untraced->shards[i].trace == 0);
  }
}

namespace {
uint64_t sum_learners(const sim_result& r, uint64_t learner_report::*field) {
  uint64_t s = 0;
  for (const auto& l : r.learners) s += l.*field;
  return s;
}
uint64_t sum_shards(const sim_result& r, uint64_t shard_report::*field) {
  uint64_t s = 0;
  for (const auto& x : r.shards) s += x.*field;
  return s;
}
}  // namespace

TEST_CASE(
    "simulation: lossy links: drops and duplicates are counted, nothing merges twice, all "
    "converge") {
  run_config c = fast_config();
  c.link.drop_rate = 0.05;
  c.link.dup_rate = 0.05;
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  const auto violations = check_invariants(*r);
  for (const auto& v : violations) INFO(v);
  CHECK(violations.empty());
  CHECK(r->run.stopped);
  CHECK(r->run.shards_flushed == 2);
  CHECK(sum_learners(*r, &learner_report::lost_deltas_network) > 0);
  CHECK(sum_shards(*r, &shard_report::deltas_dropped_duplicate) >
        0);                                                         // a repeated delta was caught
  CHECK(sum_learners(*r, &learner_report::duplicate_updates) > 0);  // and a repeated reply
  CHECK(sum_shards(*r, &shard_report::double_merges) == 0);
  auto clean = run_simulation(fast_config());
  REQUIRE(clean.ok());
  CHECK(r->eval_loss < clean->eval_loss * 1.05);
}

TEST_CASE("simulation: a partition that heals: the cut learners catch up and the run converges") {
  run_config c = fast_config();
  c.partitions = {partition_event{{1, 2}, 150.0, 100.0}};
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  const auto violations = check_invariants(*r);
  for (const auto& v : violations) INFO(v);
  CHECK(violations.empty());
  CHECK(sum_learners(*r, &learner_report::lost_deltas_partition) > 0);
  CHECK(r->learners[0].lost_deltas_partition == 0);
  CHECK(r->learners[1].lost_deltas_partition > 0);
  CHECK(r->learners[1].resyncs > 0);  // no reply for two periods: it fetched the fragments again
  for (const auto& l : r->learners) CHECK(l.idle_ns == 0);  // nobody waited for the cut learners
  CHECK(r->eval_loss < 3.2);
}

TEST_CASE("simulation: every invariant holds in a run with random failures and lossy links") {
  run_config c = fast_config();
  c.chips_per_learner = 1000;
  c.interruptions.mtbi_hours = 200.0 * 1000 / 3600.0;
  c.interruptions.recovery_s = 30;
  c.link.drop_rate = 0.02;
  c.link.dup_rate = 0.02;
  c.partitions = {partition_event{{3}, 300.0, 60.0}};
  for (uint64_t seed : {1, 2, 3}) {
    c.seed = seed;
    auto r = run_simulation(c);
    REQUIRE(r.ok());
    const auto violations = check_invariants(*r);
    INFO("seed " << seed);
    for (const auto& v : violations) INFO(v);
    CHECK(violations.empty());
    CHECK(r->supervisor.interruptions > 0);
  }
}

TEST_CASE(
    "simulation: learners join and leave mid-run while the others go on and the run converges") {
  run_config c = fast_config();
  c.max_learners = 6;
  c.membership = {membership_event{4, 150.0, true}, membership_event{5, 200.0, true},
                  membership_event{1, 300.0, false}};
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  const auto violations = check_invariants(*r);
  for (const auto& v : violations) INFO(v);
  CHECK(violations.empty());
  std::vector<uint32_t> ids;
  for (const auto& l : r->learners) ids.push_back(l.learner);
  CHECK(ids == std::vector<uint32_t>{0, 2, 3, 4, 5});  // 1 left, 4 and 5 joined
  CHECK(r->tokens() >= c.token_budget);
  for (const auto& l : r->learners) CHECK(l.idle_ns == 0);
  CHECK(r->eval_loss < 3.2);
}

TEST_CASE(
    "simulation: a learner that joins late trains from the global model, not the initial one") {
  // Learner 4 joins 40 steps before the end: it pulls every fragment and trains from the
  // global model, so its loss is the others' (started from the initial model, it would still
  // be far above them).
  run_config c = fast_config();
  c.max_learners = 5;
  c.membership = {membership_event{4, 560.0, true}};
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  CHECK_THAT(check_invariants(*r), NoViolations());
  REQUIRE(r->learners.size() == 5);
  double others = 0.0;
  for (const auto& l : r->learners) {
    if (l.learner != 4) others += l.last_loss / 4.0;
  }
  const auto& joiner = r->learners.back();
  REQUIRE(joiner.learner == 4);
  CHECK(joiner.steps > 0);
  CAPTURE(joiner.last_loss, others);
  CHECK(joiner.last_loss < others * 1.1);
}

TEST_CASE(
    "simulation: a syncer shard restarts and recovers its fragments from the learners' copies") {
  run_config c = fast_config();
  c.shard_restarts = {shard_restart_event{0, 200.0, 30.0}};
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  const auto violations = check_invariants(*r);
  for (const auto& v : violations) INFO(v);
  CHECK(violations.empty());
  CHECK(r->supervisor.shard_restarts == 1);
  CHECK(r->run.shards_flushed == 2);
  // The restarted shard went on from the recovered versions: its fragments merged many times.
  REQUIRE(r->shards.size() == 2);
  for (uint64_t v : r->shards[0].versions) CHECK(v > 20);
  for (const auto& l : r->learners) CHECK(l.version_regressions == 0);
  auto clean = run_simulation(fast_config());
  REQUIRE(clean.ok());
  CHECK(r->eval_loss < clean->eval_loss * 1.05);
}

TEST_CASE("simulation: a learner with a slow link gets its replies later") {
  run_config c = fast_config();
  c.token_budget = 4 * 16 * 200;
  c.speeds = {speed_config{}, speed_config{}, speed_config{}, speed_config{}};
  c.speeds[3].link_latency_s = 3.0;  // 60x the others, beyond tau = 2 steps of 1 s
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  CHECK_THAT(check_invariants(*r), NoViolations());
  CHECK(r->learners[3].late_updates > 0);  // its replies cannot come within tau
  CHECK(r->learners[0].late_updates == 0);
  for (const auto& l : r->learners) CHECK(l.idle_ns == 0);  // and still nobody waits
}

TEST_CASE("simulation: a region's bandwidth sets the time its learners' deltas take") {
  // Learner 0 in a region of 0.05 Gbps, the others at 50 Gbps; payloads take the wire time of
  // a 1e9-parameter model, so a fragment's delta is about 129 MB: 21 s in the slow region
  // (beyond tau = 2 steps of 1 s), 0.02 s in the fast one.
  run_config c = fast_config(4 * 16 * 200);
  c.regions = {region_config{"slow", 0.05, 0.05}, region_config{"fast", 0.05, 50}};
  c.speeds = {speed_config{}, speed_config{}, speed_config{}, speed_config{}};
  c.speeds[0].region = "slow";
  for (int i = 1; i < 4; ++i) c.speeds[static_cast<size_t>(i)].region = "fast";
  c.link.model_params = 1e9;
  REQUIRE(c.validate().ok());
  REQUIRE(c.link_of(0).bandwidth_gbps == 0.05);
  REQUIRE(c.link_of(1).bandwidth_gbps == 50);
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  CHECK_THAT(check_invariants(*r), NoViolations());
  CHECK(r->learners[0].late_updates > 0);
  for (int i = 1; i < 4; ++i) CHECK(r->learners[static_cast<size_t>(i)].late_updates == 0);
  // Both regions fast: nobody is late; the region, not the learner, made the difference.
  c.regions[0].bandwidth_gbps = 50;
  auto fast = run_simulation(c);
  REQUIRE(fast.ok());
  for (const auto& l : fast->learners) CHECK(l.late_updates == 0);
  // An unknown region is refused by name.
  c.speeds[2].region = "mars";
  const status st = c.validate();
  CHECK(st.message().find("speeds[2].region: no region 'mars' (regions: slow, fast)") !=
        std::string::npos);
}

TEST_CASE("simulation: periodic evaluations read the global model and leave the run as it was") {
  run_config c = fast_config(4 * 16 * 300);
  c.failures = {failure_event{1, 100.0, 60.0}};
  c.shard_restarts = {shard_restart_event{1, 150.0, 20.0}};
  auto plain = run_simulation(c);
  REQUIRE(plain.ok());
  sim_options o;
  o.eval_every_s = 40;
  std::vector<std::pair<double, double>> evals;
  o.on_eval = [&evals](double t, double loss) { evals.emplace_back(t, loss); };
  auto evaluated = run_simulation(c, o);
  REQUIRE(evaluated.ok());
  CHECK(evaluated->trace_hash == plain->trace_hash);
  CHECK(evaluated->eval_loss == plain->eval_loss);
  // Every 40 s of about 300, except while shard 1 was down (150 to 170 s): no global model.
  REQUIRE(evals.size() >= 5);
  for (size_t i = 0; i < evals.size(); ++i) {
    CHECK(std::fmod(evals[i].first, 40.0) == 0.0);
    CHECK(std::isfinite(evals[i].second));
    if (i > 0) CHECK(evals[i].first > evals[i - 1].first);
  }
  // Training: the global model improves from the first evaluation to the last.
  CHECK(evals.back().second < evals.front().second);

  // On the pool beside the learners' steps: the same evaluations, each reported after it was
  // taken and before the next was taken.
  o.threads = 2;
  std::vector<std::pair<double, double>> pooled;
  std::vector<std::string> order;
  o.on_eval_taken = [&order](double t) { order.push_back("taken " + std::to_string(t)); };
  o.on_eval = [&pooled, &order](double t, double loss) {
    pooled.emplace_back(t, loss);
    order.push_back("done " + std::to_string(t));
  };
  auto on_pool = run_simulation(c, o);
  REQUIRE(on_pool.ok());
  CHECK(on_pool->trace_hash == plain->trace_hash);
  CHECK(pooled == evals);
  REQUIRE(order.size() == 2 * evals.size());
  for (size_t i = 0; i < evals.size(); ++i) {
    CHECK(order[2 * i] == "taken " + std::to_string(evals[i].first));
    CHECK(order[2 * i + 1] == "done " + std::to_string(evals[i].first));
  }
}

TEST_CASE("simulation: a restarted learner's reported totals span its incarnations") {
  run_config c = fast_config(4 * 16 * 300);
  c.failures = {failure_event{1, 100.0, 60.0}};
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  REQUIRE(r->run.learner_tokens.size() == 4);
  REQUIRE(r->run.learner_steps.size() == 4);
  uint64_t tokens = 0, steps = 0;
  for (size_t i = 0; i < 4; ++i) {
    tokens += r->run.learner_tokens[i];
    steps += r->run.learner_steps[i];
    CHECK(r->run.learner_tokens[i] == r->run.learner_steps[i] * 16);
  }
  CHECK(tokens == r->run.tokens);
  CHECK(steps == r->run.steps);
  // Down for 60 of about 300 s: fewer steps than the others, and more than its restarted
  // process took alone (the first process's reports count too).
  const auto& restarted = r->learners[1];
  REQUIRE(restarted.incarnation == 1);
  CHECK(r->run.learner_steps[1] + 40 < r->run.learner_steps[0]);
  CHECK(r->run.learner_tokens[1] > restarted.tokens);
}

TEST_CASE("simulation: learners with batches and chips of their own") {
  run_config c = fast_config(4 * 16 * 200);
  c.speeds = {speed_config{}, speed_config{}, speed_config{}, speed_config{}};
  c.speeds[1].batch = 8;
  c.speeds[2].chips = 3;
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  CHECK_THAT(check_invariants(*r), NoViolations());
  // Learner 1 processes half the tokens of the others per step, over the same steps.
  CHECK(r->learners[1].tokens * 2 == r->learners[1].steps * 16);
  CHECK(r->learners[0].tokens == r->learners[0].steps * 16);
  CHECK(c.chips_of(2) == 3);
  CHECK(c.chips_of(0) == c.chips_per_learner);
  // Data parallel needs one batch.
  c.mode = run_mode::data_parallel;
  CHECK(c.validate().message().find("data parallel") != std::string::npos);
}

TEST_CASE("simulation: islands of 1 and 2 ranks in one run") {
  run_config c = fast_config(4 * 16 * 200);
  c.speeds = {speed_config{}, speed_config{}, speed_config{}, speed_config{}};
  c.speeds[1].ranks = 2;
  c.speeds[2].ranks = 3;
  c.speeds[2].batch = 8;
  REQUIRE(c.validate().ok());
  CHECK(c.batch_of(1) == 32);
  CHECK(c.batch_of(2) == 24);
  CHECK(c.chips_of(1) == 2 * c.chips_per_learner);
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  CHECK_THAT(check_invariants(*r), NoViolations());
  // Each step of an island trains every rank's batch, in the time of one rank's step: over the
  // same steps, the 2-rank island trains twice the tokens of a 1-rank learner.
  CHECK(r->learners[0].tokens == r->learners[0].steps * 16);
  CHECK(r->learners[1].tokens == r->learners[1].steps * 32);
  CHECK(r->learners[2].tokens == r->learners[2].steps * 24);
  const double per_step0 = static_cast<double>(r->learners[0].steps);
  CHECK(std::abs(static_cast<double>(r->learners[1].steps) / per_step0 - 1.0) < 0.2);
  c.speeds[1].ranks = 0;
  CHECK(c.validate().message().find("speeds[1].ranks") != std::string::npos);
}

namespace {
// A run whose shards spend 2 ms on every delta while each learner finishes a step every
// 0.2 ms and sends a delta with it.
run_config slow_syncer_config(int max_unanswered) {
  run_config c = fast_config(4 * 16 * 250);  // 250 steps per learner
  c.period_steps = 4;
  c.overlap_steps = 1;
  c.speed.step_time_s = 0.0002;
  c.debug.slow_shard_s = 0.002;
  c.max_unanswered_deltas = max_unanswered;
  return c;
}
}  // namespace

TEST_CASE("simulation: a slow syncer queues at most learners x fragments x max_unanswered") {
  auto capped = run_simulation(slow_syncer_config(2));
  REQUIRE(capped.ok());
  CHECK(check_invariants(*capped).empty());
  uint64_t held = 0;
  for (const auto& l : capped->learners) held += l.deltas_held;
  CHECK(held > 0);  // the learners did hold back
  // Each shard owns 2 fragments; per learner and fragment at most 2 unanswered deltas and the
  // final one wait for service, one of them in service.
  const uint64_t bound = 4 * 2 * (2 + 1) - 1;
  uint64_t capped_peak = 0;
  for (const auto& s : capped->shards) {
    CHECK(s.mailbox_peak <= bound);
    capped_peak = std::max(capped_peak, s.mailbox_peak);
  }
  CHECK(capped_peak >= 4);  // the queue did form
  // Without the limit the same run piles deltas up at the shards.
  auto unlimited = run_simulation(slow_syncer_config(0));
  REQUIRE(unlimited.ok());
  CHECK(check_invariants(*unlimited).empty());
  uint64_t peak = 0;
  for (const auto& s : unlimited->shards) peak = std::max(peak, s.mailbox_peak);
  INFO("peaks: capped " << capped_peak << ", unlimited " << peak);
  CHECK(peak > 4 * bound);
  for (const auto& l : unlimited->learners) CHECK(l.deltas_held == 0);
  // The merge cost is modelled: draining the queue makes the run longer than without it.
  run_config quick = slow_syncer_config(0);
  quick.debug.slow_shard_s = 0;
  auto fast = run_simulation(quick);
  REQUIRE(fast.ok());
  CHECK(unlimited->virtual_s > fast->virtual_s);
}

TEST_CASE("realtime: with max_unanswered deltas a slow syncer's mailbox stays bounded") {
  // Whatever the machine's speed: the bound follows from the protocol, not from timing.
  run_config c = slow_syncer_config(2);
  realtime_options o;
  o.timeout_s = 120;
  auto r = run_realtime(c, o);
  REQUIRE(r.ok());
  CHECK_THAT(check_invariants(*r), NoViolations());
  // Per learner and fragment: 2 unanswered deltas and the final delta at the stop, and up to
  // 3 pulls: the resync pull after two periods without a reply (once), and one for each of
  // the 2 replies in flight that finds versions missing (actors/learner.cpp). An earlier
  // bound counted one pull: a loaded machine once went one over it (43 against 42). Per
  // learner its join; per fragment 2 of the shard's own timers; and the stop.
  const uint64_t bound = 4 * 2 * (2 + 1 + 3) + 4 + 2 * 2 + 2;
  for (const auto& s : r->shards) CHECK(s.mailbox_peak <= bound);
}

TEST_CASE("simulation: a learner whose numerics go NaN stops contributing and the rest go on") {
  run_config c = fast_config();
  auto clean = run_simulation(c);
  c.debug.nonfinite_learner = 2;
  c.debug.nonfinite_step = 100;  // of about 600 steps per learner
  auto r = run_simulation(c);
  REQUIRE(clean.ok());
  REQUIRE(r.ok());
  // Reported once, by the learner that broke, with where it broke.
  REQUIRE(r->run.diverged.size() == 1);
  CHECK(r->run.diverged[0].learner == 2);
  CHECK(r->run.diverged[0].step >= 100);
  CHECK(r->run.diverged[0].step <= 117);
  const std::string& what = r->run.diverged[0].what;
  CHECK((what.find("loss is NaN") != std::string::npos ||
         what.find("first non-finite parameter: h1") != std::string::npos));
  // Nothing non-finite reached a merge: the fragments kept merging the others' deltas to the
  // end, the model is finite and trained, and the invariants hold.
  CHECK_THAT(check_invariants(*r), NoViolations());
  uint64_t merges = 0, clean_merges = 0;
  for (const auto& s : r->shards) {
    merges += s.merges;
    CHECK(s.deltas_invalid == 0);
    for (uint64_t v : s.versions) CHECK(v >= 20);  // about 6 rounds were done by step 100
  }
  for (const auto& s : clean->shards) clean_merges += s.merges;
  CHECK(merges * 10 >= clean_merges * 7);
  CHECK(first_non_finite(cfspan(r->params.data(), r->params.size())) == r->params.size());
  CHECK(std::isfinite(r->eval_loss));
  CHECK(r->eval_loss < clean->eval_loss + 0.3);
  CHECK(r->learners[2].tokens < r->learners[0].tokens / 3);
  // A clean run reports none.
  CHECK(clean->run.diverged.empty());
}

TEST_CASE("simulation: a data-parallel replica with a NaN gradient stops the baseline") {
  run_config c = as_data_parallel(fast_config());
  c.debug.nonfinite_learner = 1;
  c.debug.nonfinite_step = 30;
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  REQUIRE(r->run.diverged.size() == 1);
  CHECK(r->run.diverged[0].learner == 1);
  CHECK(r->run.diverged[0].what.find("gradient of fragment") != std::string::npos);
  CHECK(r->run.stopped);
  CHECK(r->tokens() < c.token_budget / 4);
  CHECK(first_non_finite(cfspan(r->params.data(), r->params.size())) == r->params.size());
}

TEST_CASE("simulation: a restarted learner rejoins though its fragments are lost on the way") {
  // Half of all data-plane messages are lost: the full fragments the shards send a rejoining
  // learner are among them. It must ask again rather than wait for good.
  run_config c = fast_config();
  c.link.drop_rate = 0.5;
  c.failures = {failure_event{1, 60.0, 20.0}};
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  CHECK_THAT(check_invariants(*r), NoViolations());
  const learner_report* restarted = nullptr;
  const learner_report* other = nullptr;
  for (const auto& l : r->learners) {
    if (l.learner == 1) restarted = &l;
    if (l.learner == 0) other = &l;
  }
  REQUIRE(restarted != nullptr);
  REQUIRE(other != nullptr);
  CHECK(restarted->incarnation == 1);
  // On the shared clock a learner that rejoined runs at the others' step; one still waiting
  // for its fragments would have taken none since its restart.
  CHECK(restarted->steps >= other->steps * 9 / 10);
}

TEST_CASE(
    "simulation: evaluations stop with the run, though a restart due long after keeps the clock") {
  run_config c = fast_config(4 * 16 * 100);
  // Learner 3 dies at 20 s and its restart is due at a million seconds: the clock runs on to
  // it after the run's end, and an evaluation every 10 s would otherwise run 100,000 times.
  c.failures = {failure_event{3, 20.0, 1e6}};
  sim_options o;
  o.eval_every_s = 10;
  std::vector<double> times;
  o.on_eval = [&times](double t, double) { times.push_back(t); };
  auto r = run_simulation(c, o);
  REQUIRE(r.ok());
  REQUIRE(!times.empty());
  const double end_s = to_s(r->run.end_time_ns);
  CHECK(times.back() <= end_s + 10);
  CHECK(times.size() <= static_cast<size_t>(end_s / 10) + 1);
}

TEST_CASE(
    "simulation: repeated messages: synchronous DiLoCo drops them, data parallel is refused") {
  run_config c = fast_config();
  c.link.dup_rate = 0.05;
  // The data-parallel all-reduce counts each fragment's gradient once per step: a repeat would
  // have stalled it (every learner waiting for good after a couple of steps).
  run_config dp = as_data_parallel(c);
  const status refused = dp.validate();
  CHECK(refused.message().find("link.dup_rate: repeated messages need DiLoCo") !=
        std::string::npos);
  auto direct = run_simulation(dp);
  REQUIRE_FALSE(direct.ok());
  CHECK(direct.error().message().find("link.dup_rate") != std::string::npos);
  // Synchronous DiLoCo's shards drop repeated sends and its learners repeated replies.
  auto sync = run_simulation(as_sync_diloco(c));
  REQUIRE(sync.ok());
  CHECK_THAT(check_invariants(*sync), NoViolations());
  CHECK(sync->tokens() >= c.token_budget);
  uint64_t repeats = 0;
  for (const auto& s : sync->shards) repeats += s.deltas_dropped_duplicate;
  CHECK(repeats > 0);
}

TEST_CASE("simulation: a run that goes quiet before its budget is spent breaks an invariant") {
  run_config c = fast_config();
  c.learners = 2;
  // Both learners leave early and nobody joins: nothing is left to spend the budget.
  c.membership = {membership_event{0, 20.0, false}, membership_event{1, 20.0, false}};
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  CHECK(r->tokens() < c.token_budget);
  const auto violations = check_invariants(*r);
  REQUIRE(violations.size() == 1);
  CHECK(violations[0].find("the run went quiet after " + std::to_string(r->run.tokens) + " of " +
                           std::to_string(c.token_budget) + " tokens") == 0);
  // The same run with its learners staying spends its budget: no such violation.
  c.membership.clear();
  auto whole = run_simulation(c);
  REQUIRE(whole.ok());
  CHECK_THAT(check_invariants(*whole), NoViolations());
}

// A deployed run's final values come from other nodes: malformed ones are an error naming
// what is wrong, as any message from a peer, never an out-of-range read.
TEST_CASE("simulation: final values that do not match the fragment plan are refused") {
  const run_config c = fast_config();
  auto env = actor_env::make(c, true);
  REQUIRE(env.ok());
  const auto& plan = (*env)->plan;
  REQUIRE(plan.fragments.size() >= 2);
  global_snapshot g = snapshot_params(**env, float_buffer((*env)->model->layout().buffer_floats()));
  {
    harness::collected col;
    global_snapshot short_one = g;
    short_one.values.pop_back();
    col.globals.push_back(short_one);
    auto r = harness::assemble(c, **env, col);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() ==
          "a shard's final values: " + std::to_string(plan.fragments.size()) + " fragments, " +
              std::to_string(plan.fragments.size() - 1) + " values");
  }
  {
    harness::collected col;
    global_snapshot stray = g;
    stray.fragments[0] = static_cast<uint32_t>(plan.fragments.size());
    col.globals.push_back(stray);
    auto r = harness::assemble(c, **env, col);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message() == "a shard's final values: fragment " +
                                     std::to_string(plan.fragments.size()) + " of " +
                                     std::to_string(plan.fragments.size()));
  }
  harness::collected col;
  col.globals.push_back(g);
  CHECK(harness::assemble(c, **env, col).ok());
}

// Found by the soak fuzzing of cluster files: the size checks built the model from a model
// section that had already failed its own checks.
TEST_CASE("simulation: a bad model section is one problem, named, and nothing is built from it") {
  for (const auto& [field, set] : std::vector<std::pair<std::string, void (*)(model_config&)>>{
           {"model.hidden:", [](model_config& m) { m.hidden = -5; }},
           {"model.vocab:", [](model_config& m) { m.vocab = 0; }},
           {"model.hidden_layers:", [](model_config& m) { m.hidden_layers = 1; }}}) {
    run_config c = fast_config();
    set(c.model);
    const auto problems = c.problems();
    INFO(field);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].message().rfind(field, 0) == 0);
  }
}

TEST_CASE("simulation: a run that would not fit in memory is refused before it starts") {
  run_config c = builtin_run_config();
  c.learners = 4096;
  const uint64_t floats = 205000;  // about the default model's
  // About 8 model sizes and 2 MiB per learner: 4096 x 8.7 MB is 35.7 GB.
  const status refused = check_memory(c, floats, uint64_t{20} << 30);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.message(), Catch::Contains("4096 learners") &&
                                    Catch::Contains("21.5 GB are available") &&
                                    Catch::Contains("fewer learners"));
  CHECK(check_memory(c, floats, uint64_t{40} << 30).ok());
  c.learners = 64;
  CHECK(check_memory(c, floats, uint64_t{20} << 30).ok());
  // The cost model holds no model buffers; an unknown amount of memory is not a refusal.
  c.learners = 100000;
  CHECK(check_memory(c, floats, 0).ok());
  c.compute = compute_mode::cost;
  CHECK(check_memory(c, floats, uint64_t{1} << 30).ok());
}

namespace {

// What the learners' progress reports say of the H they follow, over time.
struct period_log : run_observer {
  std::vector<std::pair<double, uint32_t>> seen;  // (time s, H), each change of any learner's
  void on_start(int64_t) override {}
  void on_progress(int64_t now_ns, const progress_msg& m) override {
    if (m.period_steps > 0 && (seen.empty() || seen.back().second != m.period_steps))
      seen.emplace_back(static_cast<double>(now_ns) * 1e-9, m.period_steps);
  }
  void on_merge(int64_t, const merge_msg&) override {}
  void on_diverged(int64_t, const diverged_msg&) override {}
  void on_stop(int64_t) override {}
};

// H's largest value before `from_s`, its largest in [from_s, to_s), and its last.
struct period_phases {
  uint32_t before = 0, during = 0, last = 0;
};
period_phases phases_of(const period_log& log, double from_s, double to_s) {
  period_phases p;
  for (const auto& [t, h] : log.seen) {
    if (t < from_s) p.before = std::max(p.before, h);
    if (t >= from_s && t < to_s) p.during = std::max(p.during, h);
    p.last = h;
  }
  return p;
}

// A valid run of `c` (its invariants held, a finite loss) with its changes of H in `log`.
sim_result run_logging_periods(const run_config& c, const std::shared_ptr<period_log>& log) {
  REQUIRE(c.validate().ok());
  sim_options o;
  o.observer = log;
  auto a = run_simulation(c, o);
  REQUIRE(a.ok());
  CHECK_THAT(check_invariants(*a), NoViolations());
  CHECK(std::isfinite(a->eval_loss));
  return std::move(*a);
}

// The same seed on 2 threads: the same run as `a`, bit for bit.
void require_same_on_two_threads(const run_config& c, const sim_result& a) {
  sim_options two;
  two.threads = 2;
  auto b = run_simulation(c, two);
  REQUIRE(b.ok());
  CHECK(a.run.trace == b->run.trace);
  CHECK(a.events == b->events);
  CHECK(same_params(a.params, b->params));
}

}  // namespace

TEST_CASE(
    "adaptive inner steps: H goes up while a link is slow and back after, deterministically") {
  const run_config c = testing::adaptive_config();
  auto log = std::make_shared<period_log>();
  const auto a = run_logging_periods(c, log);
  // Before the link slows down, the configured H; while it is slow, more; after, back.
  const period_phases h = phases_of(*log, 200, 400);
  INFO("H over time: " << log->seen.size() << " changes");
  CHECK(h.before == 16);
  CHECK(h.during > 16);
  CHECK(h.last == 16);
  require_same_on_two_threads(c, a);
  // And not the run with a fixed H.
  run_config fixed = c;
  fixed.period_auto.enabled = false;
  auto f = run_simulation(fixed);
  REQUIRE(f.ok());
  CHECK(f->run.trace != a.run.trace);
}

TEST_CASE(
    "adaptive inner steps with regional syncers: a regional syncer's slow wide-area link moves "
    "H, deterministically") {
  const run_config c = testing::regional_adaptive_config();
  auto log = std::make_shared<period_log>();
  const auto a = run_logging_periods(c, log);
  REQUIRE(a.regionals.size() == 2);
  CHECK(a.regionals[0].merges > 0);
  // Only eu's regional syncer crosses eu's wide-area link (its learners reach it over eu's own
  // network, learner 5 the shards over the default link, as fast as the wide-area links): H
  // moves up while that link is slow only because the regional syncer measures it. (Coming
  // back down waits for the rounds queued on the slow link to drain, past this short run.)
  const period_phases h = phases_of(*log, 200, 400);
  INFO("H before the link slows " << h.before << ", while it is slow " << h.during);
  CHECK(h.during > 2 * h.before);
  require_same_on_two_threads(c, a);
}

namespace {

uint64_t deltas_at_shards(const sim_result& r) {
  uint64_t n = 0;
  for (const auto& s : r.shards) n += s.deltas_received;
  return n;
}

}  // namespace

TEST_CASE(
    "regional syncers: one delta per region crosses the wide-area link; same model, same "
    "bits on any thread count") {
  const run_config c = testing::regional_config();
  REQUIRE(c.validate().ok());
  auto a = run_simulation(c);
  REQUIRE(a.ok());
  CHECK_THAT(check_invariants(*a), NoViolations());
  REQUIRE(a->regionals.size() == 2);
  // Each regional syncer merged its learners' deltas, several per merge.
  for (const auto& g : a->regionals) {
    INFO("regional syncer slot " << g.shard);
    CHECK(g.merges > 0);
    CHECK(g.deltas_merged > g.merges);
    CHECK(g.double_merges == 0);
  }
  // The flat run: every learner to the shards over its region's link.
  auto flat = run_simulation(testing::regional_config(false));
  REQUIRE(flat.ok());
  CHECK(flat->regionals.empty());
  CHECK_THAT(check_invariants(*flat), NoViolations());
  // Six learners' deltas in the flat run, three members' (two regional syncers and the learner
  // without a region) with regional syncers: about half the wide-area bytes, and the shards
  // take about half as many deltas.
  const double ratio =
      static_cast<double>(flat->wide_area_bytes()) / static_cast<double>(a->wide_area_bytes());
  INFO("wide-area bytes: flat " << flat->wide_area_bytes() << ", regional "
                                << a->wide_area_bytes());
  CHECK(ratio > 1.7);
  CHECK(deltas_at_shards(*a) * 3 < deltas_at_shards(*flat) * 2);
  // It trains: both end far below the initial model, within a few percent of each other.
  CHECK(a->eval_loss < a->initial_loss - 0.5);
  CHECK(std::abs(a->eval_loss - flat->eval_loss) < 0.05 * flat->eval_loss);
  // The same seed on 2 threads: the same run, bit for bit.
  sim_options two;
  two.threads = 2;
  auto b = run_simulation(c, two);
  REQUIRE(b.ok());
  CHECK(a->trace_hash == b->trace_hash);
  CHECK(same_params(a->params, b->params));
  CHECK(a->trace_hash != flat->trace_hash);
}

TEST_CASE(
    "regional syncers: one killed mid-run and restarted; its learners sync with the shards "
    "meanwhile and come back; the run finishes with invariants held") {
  run_config c = testing::regional_config();
  c.regional_restarts = {regional_restart_event{"eu", 150.0, 60.0}};
  REQUIRE(c.validate().ok());
  auto r = run_simulation(c);
  REQUIRE(r.ok());
  CHECK_THAT(check_invariants(*r), NoViolations());
  CHECK(r->run.stopped);
  CHECK(r->supervisor.shard_restarts == 1);
  REQUIRE(r->regionals.size() == 2);
  CHECK(r->regionals[0].incarnation == 1);  // eu's, restarted
  CHECK(r->regionals[1].incarnation == 0);
  // While it was down its three learners sent to the shards directly: the shards took more
  // deltas than in the run without the restart, and every learner trained the whole budget.
  auto calm = run_simulation(testing::regional_config());
  REQUIRE(calm.ok());
  CHECK(deltas_at_shards(*r) > deltas_at_shards(*calm));
  for (const auto& l : r->learners) {
    INFO("learner " << l.learner);
    CHECK(l.steps == calm->learners[l.learner].steps);
  }
  // After it came back, it merged again.
  CHECK(r->regionals[0].merges > 0);
  CHECK(std::isfinite(r->eval_loss));
  CHECK(r->eval_loss < r->initial_loss - 0.5);

  // A learner of the region restarted while its regional syncer is down gets the global model
  // from the shards (its join asks them for every fragment) and trains on.
  c.failures = {failure_event{1, 155.0, 25.0}};
  auto both = run_simulation(c);
  REQUIRE(both.ok());
  CHECK_THAT(check_invariants(*both), NoViolations());
  CHECK(both->supervisor.restarts == 1);
  REQUIRE(both->learners.size() == 6);
  CHECK(both->learners[1].incarnation == 1);
  CHECK(both->learners[1].steps > 0);
  CHECK(both->eval_loss < both->initial_loss - 0.5);
}

TEST_CASE(
    "regional syncers in the cost model: failures and a regional restart, invariants held, "
    "the same goodput, fewer wide-area bytes") {
  // 8 learners of 20k chips in 2 regions, 2 days, learners failing and restarting, one
  // regional syncer down for 10 minutes.
  run_config flat = cost_run(8, 20000, 2);
  for (const char* name : {"a", "b"}) {
    region_config g;
    g.name = name;
    flat.regions.push_back(g);
  }
  flat.speeds.assign(8, flat.speed);
  for (size_t l = 0; l < 8; ++l) flat.speeds[l].region = l < 4 ? "a" : "b";
  run_config regional = flat;
  for (auto& g : regional.regions) g.syncer = true;
  regional.regional_restarts = {regional_restart_event{"a", 40000.0, 600.0}};
  REQUIRE(regional.validate().ok());
  auto f = run_simulation(flat);
  auto r = run_simulation(regional);
  REQUIRE(f.ok());
  REQUIRE(r.ok());
  CHECK_THAT(check_invariants(*r), NoViolations());
  CHECK(r->supervisor.restarts > 0);  // learners failed and came back
  REQUIRE(r->regionals.size() == 2);
  CHECK(r->regionals[0].incarnation == 1);
  CHECK(r->regionals[0].merges > 0);
  CHECK(r->regionals[1].deltas_merged > r->regionals[1].merges);
  // Decoupled learners never wait for a syncer: the same failures, the same goodput.
  CHECK(r->goodput() == Approx(f->goodput()).epsilon(0.002));
  // Four learners per region: the shards take about a quarter of the bytes.
  auto wan = [](const sim_result& x) {
    return static_cast<double>(x.wide_area_bytes()) / static_cast<double>(x.tokens());
  };
  INFO("wide-area bytes/token: flat " << wan(*f) << ", regional " << wan(*r));
  CHECK(wan(*r) * 3 < wan(*f));
}

TEST_CASE("regional syncers under every fault at once: invariants held") {
  // A shard down while both regional syncers restart, learners failing around them, a
  // partition cutting a learner of each region off through it all, and lossy links: the whole
  // fragments a recovering regional syncer asks for can be lost (it asks again), a learner's
  // failover join can be lost in the partition (its regional syncer takes its outer gradients
  // as a join, but not those of a learner that has gone).
  run_config c = testing::regional_config();
  c.shard_restarts = {shard_restart_event{1, 200.0, 30.0}};
  c.regional_restarts = {regional_restart_event{"us", 195.0, 10.0},
                         regional_restart_event{"eu", 199.0, 2.0}};
  c.failures = {failure_event{4, 198.0, 5.0}, failure_event{0, 201.0, 3.0}};
  c.link.drop_rate = 0.05;
  c.partitions = {partition_event{{2, 3}, 180.0, 50.0}};
  REQUIRE(c.validate().ok());
  for (uint64_t seed : {1, 2, 3}) {
    INFO("seed " << seed);
    c.seed = seed;
    auto r = run_simulation(c);
    REQUIRE(r.ok());
    CHECK_THAT(check_invariants(*r), NoViolations());
    CHECK(r->supervisor.shard_restarts == 3);
    CHECK(r->eval_loss < r->initial_loss - 0.5);
  }
}
