// The syncer shard on its own: hostile or malformed messages are rejected and counted, valid
// ones are merged, and the shard keeps serving.
#include <cmath>
#include <limits>
#include "tests/catch.hpp"

#include "actors/reducer.hpp"
#include "actors/syncer.hpp"
#include "tensor/codec.hpp"
#include "tests/actors/sim_fixture.hpp"

using namespace diloco;

namespace {

run_config small_config() {
  run_config c = testing::tiny_config(2, 1, 2);
  c.quorum = 2;
  c.grace = false;
  return c;
}

// Encodes as a peer would; non-finite values go through unchecked, as a faulty or hostile
// peer's encoder might send them (ours refuses them).
tensor_blob encode_values(const std::vector<float>& v, codec_kind kind = codec_kind::fp32) {
  std::vector<uint8_t> bytes;
  codec_config c = codec_config::make(kind);
  c.error_feedback = false;
  if (first_non_finite(cfspan(v.data(), v.size())) != v.size()) {
    encode_unchecked_for_tests(c, cfspan(v.data(), v.size()), bytes);
  } else {
    REQUIRE(encode(c, cfspan(v.data(), v.size()), fspan(), bytes).ok());
  }
  return tensor_blob(bytes);
}

outer_gradient_msg gradient(uint32_t learner, uint32_t fragment, std::vector<float> values,
                            uint64_t base = 0) {
  outer_gradient_msg m;
  m.st.sender = learner;
  m.learner = learner;
  m.fragment = fragment;
  m.base_version = base;
  m.tokens = 64;
  m.steps = 1;
  m.send_step = 1;
  m.delta = encode_values(values);
  return m;
}

join_msg join(uint32_t learner) {
  return join_msg{stamp{learner, {}, 0}, learner, false};
}

// Shard 0 of env, with every other slot a sink.
shard_actor start_shard(testing::sim_fixture& fx, const std::shared_ptr<const actor_env>& env) {
  auto dir = fx.sink_directory(*env);
  auto shard = fx.own(fx.sys().spawn(syncer, env, 0u, directory_ptr(dir)));
  dir->shards[0] = shard;
  caf::anon_send(shard, start_msg{});
  return shard;
}

struct shard_probe {
  shard_report report;
  global_snapshot global;
};

// Learners 0 and 1 join the shard, then send `deltas` in order; drained.
void join_and_send(testing::sim_fixture& fx, const shard_actor& shard,
                   std::vector<outer_gradient_msg> deltas) {
  fx.own(fx.sys().spawn([shard, deltas](caf::event_based_actor* self) {
    self->set_default_handler(caf::drop);
    self->send(shard, join(0));
    self->send(shard, join(1));
    for (const auto& d : deltas) self->send(shard, d);
  }));
  fx.drain();
}

// Fragment 0 as the shard holds it, with its version, and as the model started.
struct fragment_zero {
  uint64_t version = 0;
  std::vector<float> before, after;
};

fragment_zero read_fragment_zero(testing::sim_fixture& fx, const actor_env& env,
                                 const shard_actor& shard) {
  global_snapshot snap;
  fx.own(fx.sys().spawn([&snap, shard](caf::event_based_actor* self) {
    self->request(shard, std::chrono::seconds(10), global_request{})
        .then([&snap](global_snapshot g) { snap = g; });
  }));
  fx.drain();
  REQUIRE(snap.fragments.size() == 2);
  const fragment& f = env.plan.fragments[0];
  fragment_zero out;
  out.version = snap.versions[0];
  out.after.resize(f.size);
  REQUIRE(decode(snap.values[0].view(), fspan(out.after.data(), f.size)).ok());
  float_buffer init(env.model->layout().buffer_floats());
  env.model->init(init, env.config.seed);
  out.before.resize(f.size);
  f.gather(init.data(), out.before.data());
  return out;
}

}  // namespace

TEST_CASE("syncer: malformed and hostile outer gradients are rejected, counted, never merged") {
  testing::sim_fixture fx;
  auto env = actor_env::make(small_config(), true);
  REQUIRE(env.ok());
  const size_t n0 = (*env)->plan.fragments[0].size;
  auto shard = start_shard(fx, *env);

  std::vector<float> good(n0, 0.01f), nan = good, wrong(n0 + 3, 0.01f);
  nan[n0 / 2] = std::numeric_limits<float>::quiet_NaN();
  auto corrupt = gradient(0, 0, good);
  {
    auto bytes = corrupt.delta.copy();
    bytes[40] ^= 0x10;
    corrupt.delta = tensor_blob(bytes);
  }
  auto truncated = gradient(0, 0, good);
  {
    auto bytes = truncated.delta.copy();
    bytes.resize(bytes.size() - 5);
    truncated.delta = tensor_blob(bytes);
  }
  fx.own(fx.sys().spawn([=](caf::event_based_actor* self) {
    self->set_default_handler(caf::drop);
    self->send(shard, join(0));
    self->send(shard, join(1));
    self->send(shard, gradient(0, 0, nan));      // NaN after decoding
    self->send(shard, gradient(0, 0, wrong));    // wrong size
    self->send(shard, gradient(0, 0, good, 5));  // version from the future
    self->send(shard, gradient(0, 7, good));     // unknown fragment
    self->send(shard, gradient(9, 0, good));     // unknown learner
    self->send(shard, corrupt);                  // flipped bit: checksum
    self->send(shard, truncated);                // truncated blob
    self->send(shard, join(42));                 // join from nobody
  }));
  fx.drain();

  shard_probe probe;
  fx.own(fx.sys().spawn([&probe, shard](caf::event_based_actor* self) {
    self->request(shard, std::chrono::seconds(10), report_request{}).then([&probe](shard_report r) {
      probe.report = r;
    });
  }));
  fx.drain();
  CHECK(probe.report.rejected_messages == 8);
  CHECK(probe.report.merges == 0);
  CHECK(probe.report.versions == std::vector<uint64_t>{0, 0});

  // The shard still works: two valid deltas reach the quorum K = 2 and merge.
  join_and_send(fx, shard, {gradient(0, 0, good), gradient(1, 0, good)});
  fx.own(fx.sys().spawn([&probe, shard](caf::event_based_actor* self) {
    self->request(shard, std::chrono::seconds(10), report_request{}).then([&probe](shard_report r) {
      probe.report = r;
    });
  }));
  fx.drain();
  CHECK(probe.report.merges == 1);
  CHECK(probe.report.deltas_merged == 2);
  CHECK(probe.report.versions == std::vector<uint64_t>{1, 0});
}

TEST_CASE("syncer: a merge applies the outer Nesterov step to the merged delta exactly") {
  testing::sim_fixture fx;
  run_config c = small_config();
  c.merge = merge_rule::weighted_average;
  c.outer.lr = 1.0;
  c.outer.momentum = 0.0;  // Theta_new = Theta - mean(delta)
  auto env = actor_env::make(c, true);
  REQUIRE(env.ok());
  const fragment& f = (*env)->plan.fragments[0];
  const size_t n = f.size;
  auto shard = start_shard(fx, *env);
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = 0.001f * static_cast<float>(i % 17);
    b[i] = -0.002f * static_cast<float>(i % 5);
  }
  join_and_send(fx, shard, {gradient(0, 0, a), gradient(1, 0, b)});
  const fragment_zero got = read_fragment_zero(fx, **env, shard);
  REQUIRE(got.version == 1);
  const std::vector<float>&before = got.before, &after = got.after;
  for (size_t i = 0; i < n; ++i) {
    // Equal token weights: the merged delta is the plain mean.
    const float expect = before[i] - 0.5f * (a[i] + b[i]);
    REQUIRE(after[i] == Approx(expect).margin(1e-6));
  }
}

TEST_CASE("syncer: a late delta counts less, by the rounds the global moved since its base") {
  // K = 1, two learners, plain mean, lr 1, no momentum. Learner 0's delta a, based on version
  // 0, carries half the round (learner 1 is expected at the same weight): the global moves by
  // a / 2, half a round. Learner 1's delta b, also based on version 0, comes after that half
  // round: (1 + 1/2)^-p of its half. Learner 0's next delta d, based on version 1, comes after
  // learner 1's merge moved the global by 0.5 x 1.5^-p of a round.
  for (const double decay : {0.0, 1.0, 2.0}) {
    testing::sim_fixture fx;
    run_config c = small_config();
    c.quorum = 1;
    c.merge = merge_rule::weighted_average;
    c.outer.lr = 1.0;
    c.outer.momentum = 0.0;
    c.staleness_decay = decay;
    auto env = actor_env::make(c, true);
    REQUIRE(env.ok());
    const fragment& f = (*env)->plan.fragments[0];
    const size_t n = f.size;
    auto shard = start_shard(fx, *env);
    std::vector<float> a(n), b(n), d(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = 0.004f * static_cast<float>(i % 13);
      b[i] = -0.003f * static_cast<float>(i % 7);
      d[i] = 0.002f * static_cast<float>(i % 5);
    }
    auto next = gradient(0, 0, d, 1);
    next.send_step = 2;
    join_and_send(fx, shard, {gradient(0, 0, a), gradient(1, 0, b), next});
    const fragment_zero got = read_fragment_zero(fx, **env, shard);
    REQUIRE(got.version == 3);  // three merges of one delta each
    const std::vector<float>&before = got.before, &after = got.after;
    const double late_b = 0.5 * std::pow(1.5, -decay);
    const double late_d = 0.5 * std::pow(1.0 + late_b, -decay);
    CAPTURE(decay);
    for (size_t i = 0; i < n; ++i) {
      const double expect = before[i] - 0.5 * a[i] - late_b * b[i] - late_d * d[i];
      REQUIRE(after[i] == Approx(expect).margin(1e-6));
    }
  }
}

TEST_CASE(
    "syncer: the final merge applies the learners' last deltas whole, or takes an outer step") {
  // K = 2, two learners, plain mean, outer lr 0.7, momentum 0.9. A round of deltas a and b
  // (based on version 0) is one Nesterov step; then the learners' final deltas c and e (based
  // on version 1) flush the fragment.
  for (const final_merge_rule rule : {final_merge_rule::average, final_merge_rule::outer}) {
    testing::sim_fixture fx;
    run_config c = small_config();
    c.merge = merge_rule::weighted_average;
    c.final_merge = rule;
    auto env = actor_env::make(c, true);
    REQUIRE(env.ok());
    const size_t n = (*env)->plan.fragments[0].size;
    auto shard = start_shard(fx, *env);
    std::vector<float> a(n), b(n), e(n), g(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = 0.004f * static_cast<float>(i % 13);
      b[i] = -0.003f * static_cast<float>(i % 7);
      e[i] = 0.002f * static_cast<float>(i % 5);
      g[i] = 0.001f * static_cast<float>(i % 3);
    }
    auto last = [](outer_gradient_msg m) {
      m.final = true;
      m.send_step = 2;
      return m;
    };
    join_and_send(fx, shard,
                  {gradient(0, 0, a), gradient(1, 0, b), last(gradient(0, 0, e, 1)),
                   last(gradient(1, 0, g, 1))});
    const fragment_zero got = read_fragment_zero(fx, **env, shard);
    REQUIRE(got.version == 2);
    const double lr = c.outer.lr, mu = c.outer.momentum;
    CAPTURE(to_string(rule));
    for (size_t i = 0; i < n; ++i) {
      const double d1 = 0.5 * (a[i] + b[i]), d2 = 0.5 * (e[i] + g[i]);
      const double round = got.before[i] - lr * (1 + mu) * d1;  // the Nesterov step of round 1
      const double expect =
          rule == final_merge_rule::average ? round - d2 : round - lr * (d2 + mu * (mu * d1 + d2));
      REQUIRE(got.after[i] == Approx(expect).margin(1e-6));
    }
  }
}

TEST_CASE(
    "syncer: the grace window is gamma of the slowest learner's slack, within every deadline") {
  const int64_t s = 1000000000;
  grace_inputs in;
  in.now_ns = s;
  in.t_sync_ns = s / 5;
  in.round_start_ns = s;
  in.tau = 4;
  in.gamma = 0.8;
  in.cap_ns = 100 * s;
  // Deadlines at 4 s and 8.5 s; at now = 1 s with t_sync 0.2 s the tightest slack is 2.8 s.
  in.deadlines_ns = {4 * s, 17 * s / 2};
  CHECK(grace_window_ns(in) == static_cast<int64_t>(0.8 * 2.8 * s));  // no step time known
  // The slowest live learner steps in 0.5 s: tau x 0.5 s - 0.2 s = 1.8 s, tighter than 2.8 s.
  in.slowest_step_ns = s / 2;
  CHECK(grace_window_ns(in) == static_cast<int64_t>(0.8 * 1.8 * s));
  // ... less the time the round waited for its quorum (0.5 s since its first delta).
  in.round_start_ns = s / 2;
  CHECK(grace_window_ns(in) == static_cast<int64_t>(0.8 * 1.3 * s));
  // A slow learner (2 s steps) does not stretch the window past a contributor's deadline.
  in.slowest_step_ns = 2 * s;
  CHECK(grace_window_ns(in) == static_cast<int64_t>(0.8 * 2.8 * s));
  in.cap_ns = s;
  CHECK(grace_window_ns(in) == s);  // capped
  in.cap_ns = 100 * s;
  in.now_ns = 5 * s;
  CHECK(grace_window_ns(in) == 0);  // past the deadline
  in.now_ns = s;
  in.deadlines_ns = {};
  CHECK(grace_window_ns(in) == 0);  // nothing pending
  in.deadlines_ns = {s};
  in.t_sync_ns = 0;
  CHECK(grace_window_ns(in) == 0);  // no slack left
}

namespace {

// Three learners join a shard at K = 1 with grace; `deltas` go one per drain of the ready
// actors, no timer fired. What the shard reported then.
struct grace_run {
  testing::sim_fixture fx;
  std::shared_ptr<const actor_env> env;
  shard_actor shard;
  explicit grace_run(int64_t cap_s = 8) {
    run_config c = testing::tiny_config(3, 1, 2);
    c.quorum = 1;
    c.grace = true;
    c.grace_cap_s = static_cast<double>(cap_s);
    auto made = actor_env::make(c, true);
    REQUIRE(made.ok());
    env = *made;
    shard = start_shard(fx, env);
    send({});
  }
  void send(std::vector<outer_gradient_msg> deltas) {
    const shard_actor to = shard;
    fx.own(fx.sys().spawn([to, deltas](caf::event_based_actor* self) {
      self->set_default_handler(caf::drop);
      if (deltas.empty()) {
        for (uint32_t l = 0; l < 3; ++l) self->send(to, join(l));
      }
      for (const auto& d : deltas) self->send(to, d);
    }));
    fx.drain(0);  // no timer
  }
  outer_gradient_msg delta(uint32_t learner, int64_t deadline_ns, int64_t step_ns = 0) {
    auto m = gradient(learner, 0, std::vector<float>(env->plan.fragments[0].size, 0.01f));
    m.deadline_ns = deadline_ns;
    m.step_time_ns = step_ns;
    return m;
  }
  shard_report report() {
    shard_report r;
    const shard_actor from = shard;
    fx.own(fx.sys().spawn([&r, from](caf::event_based_actor* self) {
      self->request(from, std::chrono::seconds(10), report_request{}).then([&r](shard_report got) {
        r = got;
      });
    }));
    fx.drain(0);
    return r;
  }
};

}  // namespace

TEST_CASE("syncer: a grace window ends as soon as every live learner's delta is in") {
  const int64_t s = 1000000000;
  grace_run run;
  run.send({run.delta(0, 10 * s)});
  shard_report r = run.report();
  CHECK(r.merges == 0);
  CHECK(r.grace_windows == 1);
  CHECK(r.grace_ns_total == 8 * s);  // gamma 0.8 of 10 s: the 8 s cap
  run.send({run.delta(1, 10 * s)});
  CHECK(run.report().merges == 0);  // learner 2 may still come
  run.send({run.delta(2, 10 * s)});
  r = run.report();
  CHECK(r.merges == 1);  // everyone is in: merged at once, no timer fired
  CHECK(r.deltas_merged == 3);
  CHECK(r.grace_ns_total == 0);  // no time waited
}

TEST_CASE("syncer: a delta with a tighter deadline moves an armed grace window earlier") {
  const int64_t s = 1000000000;
  grace_run run;
  run.send({run.delta(0, 10 * s)});
  CHECK(run.report().grace_ns_total == 8 * s);
  // Learner 1 mixes its reply at 2 s: the window now ends at 0.8 x 2 s.
  run.send({run.delta(1, 2 * s)});
  shard_report r = run.report();
  CHECK(r.merges == 0);
  CHECK(r.grace_windows == 1);
  CHECK(r.grace_ns_total == 8 * s / 5);
  run.fx.drain(1);  // the earliest timer: the window's end
  r = run.report();
  CHECK(r.merges == 1);
  CHECK(r.deltas_merged == 2);
  CHECK(r.grace_ns_total == 8 * s / 5);
  run.fx.drain();  // the first timer, of a round merged already: nothing more
  CHECK(run.report().merges == 1);
}

TEST_CASE("syncer: the grace window follows the slowest live learner's step time") {
  const int64_t s = 1000000000;
  grace_run run;
  // Steps of 0.25 s, tau 4: a slack of 1 s, of which the window takes 0.8 s.
  run.send({run.delta(0, 10 * s, s / 4)});
  CHECK(run.report().grace_ns_total == 4 * s / 5);
  // Learner 1 reports 0.5 s steps but its deadline (1.5 s) is tighter than 2 s: 1.2 s; the armed
  // 0.8 s window ends first and stays.
  run.send({run.delta(1, 3 * s / 2, s / 2)});
  CHECK(run.report().grace_ns_total == 4 * s / 5);
}

TEST_CASE(
    "syncer: the grace window follows the slowest live learner when it becomes faster or "
    "leaves") {
  const int64_t s = 1000000000;
  grace_run run;
  // Learner 0 at 0.5 s steps, the slowest known: tau 4, a slack of 2 s, a window of 1.6 s.
  run.send({run.delta(0, 10 * s, s / 2)});
  CHECK(run.report().grace_ns_total == 8 * s / 5);
  // Learner 1 at 0.375 s steps: still learner 0 the slowest; the armed window stays.
  run.send({run.delta(1, 10 * s, 3 * s / 8)});
  CHECK(run.report().grace_ns_total == 8 * s / 5);
  // Learner 0 again, now at 0.25 s steps: the slowest is learner 1's 0.375 s (slack 1.5 s),
  // and the window moves earlier to 1.2 s.
  auto again = run.delta(0, 10 * s, s / 4);
  again.send_step = 2;
  run.send({again});
  shard_report r = run.report();
  CHECK(r.grace_ns_total == 6 * s / 5);
  CHECK(r.merges == 0);
  // Learner 1 leaves: learner 0's 0.25 s steps are the slowest left (slack 1 s): 0.8 s.
  const shard_actor to = run.shard;
  run.fx.own(run.fx.sys().spawn([to](caf::event_based_actor* self) {
    self->send(to, closed_msg{stamp{1, {}, 0}, 0});
  }));
  run.fx.drain(0);
  r = run.report();
  CHECK(r.grace_ns_total == 4 * s / 5);
  CHECK(r.grace_windows == 1);
  CHECK(r.merges == 0);  // learner 2 is live and may still come
}

namespace {

gradient_msg dp_gradient(uint32_t learner, uint32_t fragment, uint64_t step,
                         const std::vector<float>& values) {
  return gradient_msg{stamp{learner, {}, 0}, fragment, learner, step, encode_values(values)};
}

// A learner slot that keeps every reduced gradient it is sent.
learner_actor reduced_probe(testing::sim_fixture& fx,
                            std::shared_ptr<std::vector<reduced_gradient_msg>> got) {
  return caf::actor_cast<learner_actor>(
      fx.own(fx.sys().spawn([got](caf::event_based_actor* self) -> caf::behavior {
        testing::ignore_unhandled(self);
        return {[got](reduced_gradient_msg& m) { got->push_back(m); }};
      })));
}

std::vector<float> decoded(const tensor_blob& b, size_t n) {
  std::vector<float> v(n);
  REQUIRE(decode(b.view(), fspan(v.data(), n)).ok());
  return v;
}

}  // namespace

TEST_CASE(
    "reducer: the data-parallel all-reduce answers every live learner with the mean, step by "
    "step") {
  testing::sim_fixture fx;
  auto env = actor_env::make(as_data_parallel(small_config()), true);
  REQUIRE(env.ok());
  const size_t n = (*env)->plan.fragments[1].size;
  auto dir = fx.sink_directory(**env);
  auto got0 = std::make_shared<std::vector<reduced_gradient_msg>>();
  auto got1 = std::make_shared<std::vector<reduced_gradient_msg>>();
  dir->learners[0] = reduced_probe(fx, got0);
  dir->learners[1] = reduced_probe(fx, got1);
  auto shard = fx.own(fx.sys().spawn(reducer, *env, 0u, directory_ptr(dir)));
  dir->shards[0] = shard;
  caf::anon_send(shard, start_msg{});

  std::vector<float> a(n), b(n), c(n, 0.5f), nan(n, 0.25f);
  for (size_t i = 0; i < n; ++i) {
    a[i] = 0.01f * static_cast<float>(i % 7);
    b[i] = -0.03f * static_cast<float>(i % 3);
  }
  nan[1] = std::numeric_limits<float>::quiet_NaN();
  fx.own(fx.sys().spawn([=](caf::event_based_actor* self) {
    self->set_default_handler(caf::drop);
    self->send(shard, join(0));
    self->send(shard, join(1));
    self->send(shard, dp_gradient(0, 1, 2, c));  // step 2 before step 1: waits for step 1
    self->send(shard, dp_gradient(0, 1, 1, a));
    self->send(shard, dp_gradient(1, 1, 1, nan));  // rejected: step 1 still waits for learner 1
    self->send(shard, dp_gradient(1, 3, 1, b));    // a fragment another shard would own
  }));
  fx.drain();
  CHECK(got0->empty());
  CHECK(got1->empty());

  fx.own(fx.sys().spawn([=](caf::event_based_actor* self) {
    self->set_default_handler(caf::drop);
    self->send(shard, dp_gradient(1, 1, 1, b));
  }));
  fx.drain();
  // Step 1 complete: both learners get mean(a, b); step 2 still waits for learner 1.
  for (const auto& got : {got0, got1}) {
    REQUIRE(got->size() == 1);
    const auto& m = got->front();
    CHECK(m.fragment == 1);
    CHECK(m.step == 1);
    CHECK(m.contributors == 2);
    const auto mean = decoded(m.grad, n);
    for (size_t i = 0; i < n; ++i) REQUIRE(mean[i] == Approx(0.5f * (a[i] + b[i])).margin(1e-7));
  }

  // Learner 1's process ends: step 2 is complete with learner 0 alone, and only it is answered.
  fx.own(fx.sys().spawn([=](caf::event_based_actor* self) {
    self->set_default_handler(caf::drop);
    self->send(shard, closed_msg{stamp{1, {}, 0}, 0});
  }));
  fx.drain();
  REQUIRE(got0->size() == 2);
  CHECK(got1->size() == 1);
  CHECK(got0->back().step == 2);
  CHECK(got0->back().contributors == 1);
  CHECK(decoded(got0->back().grad, n) == c);

  shard_report report;
  fx.own(fx.sys().spawn([&report, shard](caf::event_based_actor* self) {
    self->request(shard, std::chrono::seconds(10), report_request{})
        .then([&report](shard_report r) { report = r; });
  }));
  fx.drain();
  CHECK(report.rejected_messages == 2);
  CHECK(report.merges == 2);
  CHECK(report.deltas_merged == 3);
}
