// The data-parallel learner on its own, against a stand-in shard: one gradient per fragment
// per step, nothing more until the mean is back; reduced gradients for the wrong step, of a
// fragment that does not exist or with non-finite values are rejected and counted; and with
// one learner, whose mean is its own gradient, its weights after n steps are bit for bit
// those of n plain training steps of the same model.
#include <limits>
#include "tests/catch.hpp"

#include "actors/dp_learner.hpp"
#include "tensor/codec.hpp"
#include "tests/actors/sim_fixture.hpp"

using namespace diloco;

namespace {

run_config dp_config() {
  run_config c = testing::tiny_config(1, 1, 3);
  c.batch = 8;
  return as_data_parallel(c);
}

struct shard_view {
  std::vector<std::pair<uint32_t, uint64_t>> gradients;  // (fragment, step), as they came
};

tensor_blob fp32(const std::vector<float>& v) {
  std::vector<uint8_t> bytes;
  encode_unchecked_for_tests(codec_config::make(codec_kind::fp32), cfspan(v.data(), v.size()),
                             bytes);
  return tensor_blob(bytes);
}

}  // namespace

TEST_CASE("dp learner: with its own gradient as the mean it trains exactly as a plain loop") {
  const int steps = 6;
  testing::sim_fixture fx;
  auto env = actor_env::make(dp_config(), true);
  REQUIRE(env.ok());
  const auto& plan = (*env)->plan;
  REQUIRE(plan.fragments.size() == 3);
  auto dir = fx.sink_directory(**env);
  const directory_ptr wiring = dir;
  shard_view seen;
  // The all-reduce of one learner: the mean is its gradient. Before the first answer, three
  // answers that must be refused.
  auto stand_in =
      fx.own(fx.sys().spawn([&seen, wiring, &plan](caf::event_based_actor* self) -> caf::behavior {
        testing::ignore_unhandled(self);
        return {[&seen, wiring, &plan, self](gradient_msg& m) {
          seen.gradients.emplace_back(m.fragment, m.step);
          if (m.step >= steps) return;  // the run ends: the learner waits for good
          const auto to = wiring->learners[0];
          if (m.step == 0 && m.fragment == 0) {
            std::vector<float> nan(plan.fragments[0].size, 0.5f);
            nan.back() = std::numeric_limits<float>::quiet_NaN();
            self->send(to, reduced_gradient_msg{stamp{}, 0, 0, 1, fp32(nan)});
            self->send(to, reduced_gradient_msg{stamp{}, 0, 4, 1, m.grad});  // a future step
            self->send(to, reduced_gradient_msg{stamp{}, 9, 0, 1, m.grad});  // no fragment 9
          }
          self->send(to, reduced_gradient_msg{stamp{}, m.fragment, m.step, 1, m.grad});
        }};
      }));
  dir->shards[0] = caf::actor_cast<shard_actor>(stand_in);
  auto l = fx.own(fx.sys().spawn(dp_learner, *env, 0u, wiring));
  dir->learners[0] = l;
  caf::anon_send(l, start_msg{});
  fx.drain();

  // One gradient per fragment per step, step by step; the step after the last is sent and
  // waits.
  REQUIRE(seen.gradients.size() == 3 * (steps + 1));
  for (size_t k = 0; k < seen.gradients.size(); ++k) {
    CHECK(seen.gradients[k].second == k / 3);
  }
  learner_report report;
  global_snapshot weights;
  fx.own(fx.sys().spawn([&report, &weights, l](caf::event_based_actor* self) {
    self->request(l, std::chrono::seconds(1), report_request{}).then([&report](learner_report r) {
      report = r;
    });
    self->request(l, std::chrono::seconds(1), global_request{}).then([&weights](global_snapshot g) {
      weights = g;
    });
  }));
  fx.drain();
  CHECK(report.rejected_messages == 3);
  CHECK(report.steps == steps);

  // The same model, trained by hand.
  auto trainer = (*env)->model->make(learner_spec{0, 1, (*env)->config.seed, 0, 0, nullptr});
  REQUIRE(trainer.ok());
  for (int s = 0; s < steps; ++s) {
    REQUIRE((*trainer)->compute_gradients().ok());
    REQUIRE((*trainer)->apply_gradients((*env)->config.inner, (*trainer)->steps_done()).ok());
  }
  const global_snapshot expect = snapshot_params(**env, (*trainer)->params());
  REQUIRE(weights.values.size() == expect.values.size());
  for (size_t f = 0; f < expect.values.size(); ++f) {
    CHECK(weights.values[f].copy() == expect.values[f].copy());
  }
}
