// The per-destination table of an outbox (runtime/per_dest.hpp) is the vector it stands for:
// the same values, length and dense form under random writes, through the switch from a short
// list to a dense vector, and back from its dense form.
#include "tests/catch.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/per_dest.hpp"
#include "tensor/rng.hpp"

using namespace diloco;

namespace {

// The vector semantics the outbox had: grown with `fill` to one past what is written.
struct model {
  int64_t fill;
  std::vector<int64_t> v;
  int64_t& at(uint32_t d) {
    if (d >= v.size()) v.resize(size_t{d} + 1, fill);
    return v[d];
  }
  int64_t get(uint32_t d) const { return d < v.size() ? v[d] : fill; }
};

void check_same(const per_dest<int64_t>& t, const model& m, uint32_t span) {
  REQUIRE(t.size() == m.v.size());
  REQUIRE(t.dense() == m.v);
  for (uint32_t d = 0; d < span; ++d) REQUIRE(t.get(d) == m.get(d));
}

}  // namespace

TEST_CASE("per_dest: the vector it stands for, sparse and dense", "[transport]") {
  for (const int64_t fill : {int64_t{0}, INT64_MIN}) {
    // Few destinations (a learner: stays a list) and many (a shard: turns dense).
    for (const uint32_t destinations : {3u, 40u}) {
      rng r(7 + destinations);
      per_dest<int64_t> t(fill);
      model m{fill, {}};
      REQUIRE(t.size() == 0);
      REQUIRE(t.get(5) == fill);
      std::vector<uint32_t> dests;
      for (uint32_t i = 0; i < destinations; ++i)
        dests.push_back(static_cast<uint32_t>(r.below(5000)));
      for (int step = 0; step < 2000; ++step) {
        const uint32_t d = dests[r.below(dests.size())];
        const auto v = static_cast<int64_t>(r.below(1000000));
        t.at(d) = std::max(t.at(d), v);
        m.at(d) = std::max(m.at(d), v);
        if (step % 97 == 0) check_same(t, m, 5001);
      }
      check_same(t, m, 5001);
      // Through its dense form (a snapshot) and back.
      per_dest<int64_t> loaded(fill);
      loaded.assign(t.dense());
      check_same(loaded, m, 5001);
      loaded.at(4999) = 1;
      m.at(4999) = 1;
      check_same(loaded, m, 5001);
    }
  }
}

TEST_CASE("per_dest: a vector of fill values keeps its length", "[transport]") {
  per_dest<int64_t> t(INT64_MIN);
  t.assign(std::vector<int64_t>(9, INT64_MIN));
  REQUIRE(t.size() == 9);
  REQUIRE(t.dense() == std::vector<int64_t>(9, INT64_MIN));
  t.at(2) = 4;
  REQUIRE(t.size() == 9);
  REQUIRE(t.get(2) == 4);
}
