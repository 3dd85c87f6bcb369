// The learner on its own: malformed or hostile fragment updates are rejected and counted; the
// learner asks for the whole fragment instead and keeps training.
#include <cmath>
#include <limits>
#include "tests/catch.hpp"

#include "actors/learner.hpp"
#include "actors/metrics.hpp"
#include "actors/scheduler.hpp"
#include "tensor/codec.hpp"
#include "tests/actors/sim_fixture.hpp"

using namespace diloco;

namespace {

run_config small_config() {
  run_config c = testing::tiny_config(1, 1, 1);
  c.batch = 8;
  c.token_budget = 8 * 50;
  return c;
}

// A stand-in shard that records what the learner sends it.
struct shard_log {
  int joins = 0;
  int gradients = 0;
  int pulls = 0;
};

// Learner 0 of `env` started with its metrics actor and fragment scheduler, `shard` as shard 0
// and every other slot a sink.
learner_actor start_learner(testing::sim_fixture& fx, const std::shared_ptr<const actor_env>& env,
                            const caf::actor& shard) {
  auto dir = fx.sink_directory(*env);
  const directory_ptr wiring = dir;
  dir->shards[0] = caf::actor_cast<shard_actor>(shard);
  dir->metrics = fx.own(fx.sys().spawn(metrics, env, wiring));
  dir->scheduler = fx.own(fx.sys().spawn(fragment_scheduler, env, wiring));
  auto l = fx.own(fx.sys().spawn(learner, env, 0u, wiring));
  dir->learners[0] = l;
  caf::anon_send(dir->metrics, start_msg{});
  caf::anon_send(dir->scheduler, start_msg{});
  caf::anon_send(l, start_msg{});
  return l;
}

}  // namespace

TEST_CASE("learner: hostile fragment updates are rejected, counted, and answered with a pull") {
  testing::sim_fixture fx;
  auto env = actor_env::make(small_config(), true);
  REQUIRE(env.ok());
  const size_t n = (*env)->plan.fragments[0].size;
  shard_log log;
  auto fake_shard = fx.own(fx.sys().spawn([&log](caf::event_based_actor* self) -> caf::behavior {
    self->set_default_handler(caf::drop);
    return {
        [](start_msg) {},
        [&log](join_msg&) { log.joins++; },
        [&log](outer_gradient_msg&) { log.gradients++; },
        [&log](pull_msg&) { log.pulls++; },
    };
  }));
  auto l = start_learner(fx, *env, fake_shard);

  std::vector<float> nan(n, 0.0f);
  nan[3] = std::numeric_limits<float>::infinity();
  std::vector<uint8_t> bytes;
  // What a faulty or hostile peer could send (encode itself refuses non-finite values).
  encode_unchecked_for_tests(codec_config::make(codec_kind::fp32), cfspan(nan.data(), n), bytes);
  fragment_update_msg inf_update{stamp{}, 0, 0, 1, 16, false, {tensor_blob(bytes)}};
  fragment_update_msg wrong_count{stamp{}, 0, 0, 3, 16, false, {tensor_blob(bytes)}};
  fragment_update_msg bad_fragment{stamp{}, 5, 0, 1, 16, false, {tensor_blob(bytes)}};
  std::vector<float> small(n / 2, 0.0f);
  REQUIRE(encode(codec_config::make(codec_kind::fp32), cfspan(small.data(), small.size()), fspan(),
                 bytes)
              .ok());
  fragment_update_msg wrong_size{stamp{}, 0, 0, 1, 16, false, {tensor_blob(bytes)}};
  fx.own(fx.sys().spawn([=](caf::event_based_actor* self) {
    self->send(l, inf_update);
    self->send(l, wrong_count);
    self->send(l, bad_fragment);
    self->send(l, wrong_size);
  }));
  fx.drain();

  learner_report report;
  fx.own(fx.sys().spawn([&report, l](caf::event_based_actor* self) {
    self->request(l, std::chrono::seconds(1), report_request{}).then([&report](learner_report r) {
      report = r;
    });
  }));
  fx.drain();
  CHECK(report.rejected_messages == 4);
  CHECK(log.joins == 1);
  CHECK(log.pulls == 2);  // the two well-addressed but bad updates: fetch the whole fragment
  // It trained through all of it until the budget (metrics stopped it) and sent its deltas.
  CHECK(report.steps >= 50);
  CHECK(log.gradients > 0);
}

TEST_CASE("learner: a delta's token count is the work it carries, alpha of the overlap steps") {
  // One learner, H = 8, tau = 2, every send answered at once with a zero update, merged tau
  // steps later. The first delta carries its 8 steps; each later one the 6 steps after the merge
  // and the share alpha of the 2 steps between its send and the merge that the blend kept.
  for (const double alpha : {0.0, 0.5, 1.0}) {
    testing::sim_fixture fx;
    run_config c = small_config();
    c.period_steps = 8;
    c.overlap_steps = 2;
    c.alpha = alpha;
    auto env = actor_env::make(c, true);
    REQUIRE(env.ok());
    const size_t n = (*env)->plan.fragments[0].size;
    std::vector<float> zero(n, 0.0f);
    std::vector<uint8_t> bytes;
    REQUIRE(encode(codec_config::make(c.downlink), cfspan(zero.data(), n), fspan(), bytes).ok());
    const tensor_blob update(bytes);
    auto sent = std::make_shared<std::vector<outer_gradient_msg>>();
    auto learner_handle = std::make_shared<learner_actor>();
    auto fake_shard = fx.own(fx.sys().spawn([=](caf::event_based_actor* self) -> caf::behavior {
      testing::ignore_unhandled(self);
      return {[=](outer_gradient_msg& m) {
        sent->push_back(m);
        if (m.final) return;
        self->send(
            *learner_handle,
            fragment_update_msg{
                stamp{}, 0, m.base_version, m.base_version + 1, m.send_step, false, {update}});
      }};
    }));
    auto l = start_learner(fx, *env, fake_shard);
    *learner_handle = l;
    fx.drain();

    CAPTURE(alpha);
    REQUIRE(sent->size() >= 5);
    const auto kept = static_cast<uint64_t>(std::llround(alpha * 2));
    const outer_gradient_msg& first = sent->front();
    CHECK(first.steps == first.send_step);
    uint64_t total_steps = first.steps;
    for (size_t i = 1; i < sent->size(); ++i) {
      const outer_gradient_msg& m = (*sent)[i];
      CAPTURE(i, m.send_step, m.final);
      CHECK(m.tokens == m.steps * static_cast<uint64_t>(c.batch));
      total_steps += m.steps;
      if (m.final) continue;
      CHECK(m.steps == 6 + kept);
    }
    // Over the run the deltas count every step the learner took but the share 1 - alpha of
    // each overlap before a merge (every send but the final one was merged).
    learner_report report;
    fx.own(fx.sys().spawn([&report, l](caf::event_based_actor* self) {
      self->request(l, std::chrono::seconds(1), report_request{}).then([&report](learner_report r) {
        report = r;
      });
    }));
    fx.drain();
    REQUIRE(report.steps >= 50);
    CHECK(total_steps == report.steps - (sent->size() - 1) * (2 - kept));
  }
}
