#include "tests/catch.hpp"
#include <numeric>
#include <vector>

#include "tensor/fragment.hpp"
#include "tensor/model.hpp"
#include "tensor/rng.hpp"

using namespace diloco;

namespace {

// Every parameter (not padding) is in exactly one fragment.
void check_cover(const param_layout& layout, const fragment_plan& plan) {
  std::vector<int> owner(layout.buffer_floats(), -1);
  for (const auto& f : plan.fragments) {
    size_t sum = 0;
    for (const auto& s : f.spans) {
      for (size_t i = s.offset; i < s.offset + s.count; ++i) {
        REQUIRE(owner[i] == -1);
        owner[i] = f.id;
      }
      sum += s.count;
    }
    REQUIRE(sum == f.size);
  }
  for (const auto& t : layout.tensors()) {
    for (size_t i = t.offset; i < t.offset + t.size(); ++i) {
      REQUIRE(owner[i] >= 0);
      // Embedding marking follows the tensor's role.
    }
  }
  CHECK(plan.total() == layout.param_count());
}

}  // namespace

TEST_CASE("fragment: balanced packing of the default model is within 4/3 of ideal") {
  mlp_lm m(model_config{});
  for (int P = 1; P <= 32; ++P) {
    auto plan = plan_balanced(m.layout(), P);
    REQUIRE(plan.ok());
    REQUIRE(plan->fragments.size() == static_cast<size_t>(P));
    check_cover(m.layout(), *plan);
    INFO("P = " << P << ", imbalance " << plan->imbalance());
    CHECK(plan->imbalance() <= 4.0 / 3.0);
  }
}

TEST_CASE("fragment: balanced packing keeps the 4/3 bound on random tensor-size sets") {
  rng g(17);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = 1 + g.below(40);
    std::vector<size_t> sizes(n);
    for (auto& s : sizes) {
      // Heavy tails: a few huge tensors among many small ones.
      s = 1 + static_cast<size_t>(std::exp(g.uniform() * 14.0));
    }
    if (trial % 10 == 0) sizes[0] = 1000000;  // one tensor larger than all others together
    const int P = 1 + static_cast<int>(g.below(24));
    const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0});
    if (total < static_cast<size_t>(3 * P)) continue;  // integer sizes cannot split finer
    const auto bins = pack_sizes(sizes, P);
    size_t largest = 0, sum = 0;
    for (const auto& bin : bins) {
      const size_t load = std::accumulate(bin.begin(), bin.end(), size_t{0});
      largest = std::max(largest, load);
      sum += load;
    }
    REQUIRE(sum == total);
    INFO("trial " << trial << " P " << P << " total " << total << " largest " << largest);
    REQUIRE(static_cast<double>(largest) <= 4.0 / 3.0 * static_cast<double>(total) / P);
  }
}

TEST_CASE("fragment: strided pattern puts whole layers into fragment layer mod P") {
  mlp_lm m(model_config{});  // layers 0 (embedding) .. 3 (output)
  auto plan = plan_strided(m.layout(), 2);
  REQUIRE(plan.ok());
  check_cover(m.layout(), *plan);
  for (const auto& t : m.layout().tensors()) {
    const auto& f = plan->fragments[t.layer % 2];
    bool found = false;
    for (const auto& s : f.spans)
      found = found || (s.offset <= t.offset && t.offset + t.size() <= s.offset + s.count);
    CHECK(found);
  }
  auto too_many = plan_strided(m.layout(), 5);
  REQUIRE_FALSE(too_many.ok());
  CHECK(too_many.error().message().find("strided") != std::string::npos);
}

TEST_CASE("fragment: gather and scatter round-trip and embedding ranges are marked") {
  mlp_lm m(model_config{});
  auto plan = plan_balanced(m.layout(), 3);
  REQUIRE(plan.ok());
  std::vector<float> buf(m.layout().buffer_floats()), back(buf.size(), 0.0f);
  std::iota(buf.begin(), buf.end(), 0.0f);
  size_t embedding_total = 0;
  for (const auto& f : plan->fragments) {
    std::vector<float> local(f.size);
    f.gather(buf.data(), local.data());
    f.scatter(local.data(), back.data());
    for (const auto& [b, e] : f.local_ranges(true)) embedding_total += e - b;
    size_t covered = 0;
    for (bool emb : {true, false}) {
      for (const auto& [b, e] : f.local_ranges(emb)) covered += e - b;
    }
    CHECK(covered == f.size);
  }
  CHECK(embedding_total == m.layout().at(0).size());
  for (const auto& t : m.layout().tensors()) {
    for (size_t i = t.offset; i < t.offset + t.size(); ++i) REQUIRE(back[i] == buf[i]);
  }
}

TEST_CASE("fragment: bad counts are errors") {
  mlp_lm m(model_config{});
  CHECK_FALSE(plan_balanced(m.layout(), 0).ok());
  CHECK_FALSE(plan_balanced(m.layout(), 10000000).ok());
  CHECK(parse_fragment_pattern("strided").ok());
  CHECK_FALSE(parse_fragment_pattern("zigzag").ok());
}
