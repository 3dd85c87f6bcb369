// The built-in MLP learner computing its steps ahead on a pool: whatever the hints, and whether
// they hold or not, every step is the step computed in place, bit for bit.
#include "tests/catch.hpp"

#include <cstring>
#include <memory>
#include <vector>

#include "base/job_pool.hpp"
#include "runtime/builtin_model.hpp"

using namespace diloco;

namespace {

bool same_bits(const float_buffer& a, const float_buffer& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A stand-in for a merge of the global model: a blend of the first `n` parameters.
void blend(float_buffer& params, float with, size_t n) {
  for (size_t i = 0; i < n && i < params.size(); ++i) params[i] = 0.5f * params[i] + 0.5f * with;
}

}  // namespace

TEST_CASE("builtin model: steps computed ahead, after a merge or not, are the steps, bit for bit") {
  data_config dc;
  auto data = data_source::build(dc, 8);
  REQUIRE(data.ok());
  model_config mc;
  mc.hidden = 32;
  const auto family = builtin_mlp_family(mc, 16, *data);
  adamw_config oc;
  oc.warmup_steps = 3;
  oc.total_steps = 40;
  learner_spec spec;
  spec.index = 1;
  spec.learners = 2;
  spec.seed = 9;
  auto in_place = family->make(spec);
  spec.ahead = std::make_shared<job_pool>(2);
  auto ahead = family->make(spec);
  REQUIRE(in_place.ok());
  REQUIRE(ahead.ok());
  learner_compute& a = **ahead;
  learner_compute& b = **in_place;
  const auto merge = [](float_buffer& p) { blend(p, 0.25f, 500); };
  const auto other = [](float_buffer& p) { blend(p, -0.75f, 500); };
  for (int s = 0; s < 40; ++s) {
    INFO("step " << s);
    const auto pa = a.step(oc, s);
    const auto pb = b.step(oc, s);
    REQUIRE(pa.ok());
    REQUIRE(pb.ok());
    CHECK(pa->loss == pb->loss);
    CHECK(pa->grad_norm == pb->grad_norm);
    CHECK(pa->lr == pb->lr);
    // Counted while its update may still be pending.
    CHECK(a.steps_done() == b.steps_done());
    CHECK(a.tokens_done() == b.tokens_done());
    // Reading the parameters runs the update here; on other steps it goes to the pool with
    // the next step ahead.
    if (s % 4 == 0) REQUIRE(same_bits(a.params_to_read(), b.params_to_read()));
    switch (s % 6) {
      case 0:  // the plain guess, and it holds
        a.compute_ahead(oc, s + 1);
        break;
      case 1:  // a merge due before the next step was known at once, and is applied
        a.compute_ahead_after(oc, s + 1, merge);
        merge(a.params());
        merge(b.params());
        break;
      case 2:  // the merge became known during the step, and is applied
        a.compute_ahead(oc, s + 1);
        a.compute_ahead_after(oc, s + 1, merge);
        merge(a.params());
        merge(b.params());
        break;
      case 3:  // a merge was expected, another came
        a.compute_ahead_after(oc, s + 1, merge);
        other(a.params());
        other(b.params());
        break;
      case 4:  // a merge was expected, none came
        a.compute_ahead(oc, s + 1);
        a.compute_ahead_after(oc, s + 1, merge);
        break;
      case 5:  // the plain guess, but the schedule step differs
        a.compute_ahead(oc, s + 7);
        break;
    }
  }
  REQUIRE(same_bits(a.params_to_read(), b.params_to_read()));
  std::vector<uint8_t> sa, sb;
  REQUIRE(a.save(sa).ok());
  REQUIRE(b.save(sb).ok());
  CHECK(sa == sb);
  CHECK(a.steps_done() == 40);
}
