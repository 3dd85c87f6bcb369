#include "tests/catch.hpp"
#include <vector>

#include "protocol/vector_clock.hpp"
#include "tensor/rng.hpp"

using namespace diloco;

namespace {
vector_clock random_clock(rng& g, size_t n) {
  std::vector<uint64_t> t(n);
  for (auto& x : t) x = g.below(4);
  return vector_clock(t);
}
}  // namespace

TEST_CASE("vector clock: the order is reflexive, antisymmetric and transitive") {
  rng g(1);
  for (int i = 0; i < 500; ++i) {
    const auto a = random_clock(g, 1 + g.below(4)), b = random_clock(g, 1 + g.below(4)),
               c = random_clock(g, 1 + g.below(4));
    REQUIRE(a.leq(a));
    REQUIRE_FALSE(a.happened_before(a));
    if (a.leq(b) && b.leq(a)) REQUIRE(a == b);
    if (a.leq(b) && b.leq(c)) REQUIRE(a.leq(c));
    // Exactly one of: equal, a before b, b before a, concurrent.
    const int cases = (a == b) + a.happened_before(b) + b.happened_before(a) + a.concurrent(b);
    REQUIRE(cases == 1);
  }
}

TEST_CASE("vector clock: merge is the least upper bound") {
  rng g(2);
  for (int i = 0; i < 500; ++i) {
    const auto a = random_clock(g, 1 + g.below(5)), b = random_clock(g, 1 + g.below(5));
    vector_clock m = a;
    m.merge(b);
    REQUIRE(a.leq(m));
    REQUIRE(b.leq(m));
    // Any other upper bound is above the merge.
    const auto u = random_clock(g, 5);
    if (a.leq(u) && b.leq(u)) REQUIRE(m.leq(u));
    // Commutative and idempotent.
    vector_clock m2 = b;
    m2.merge(a);
    REQUIRE(m == m2);
    vector_clock m3 = m;
    m3.merge(m);
    REQUIRE(m3 == m);
  }
}

TEST_CASE("vector clock: messages order causally, independent events are concurrent") {
  vector_clock p, q, r;
  p.tick(0);  // p does something
  vector_clock sent = p;
  p.tick(0);  // p goes on after sending
  q.merge(sent);
  q.tick(1);  // q receives p's message
  r.tick(2);  // r never hears from anyone
  CHECK(sent.happened_before(q));
  CHECK(sent.happened_before(p));
  CHECK(p.concurrent(q));  // p's later event and q's receipt are unordered
  CHECK(r.concurrent(q));
  CHECK(r.concurrent(p));
  CHECK_FALSE(q.happened_before(sent));
}

TEST_CASE("vector clock: missing entries count as zero, so clocks of different lengths compare") {
  vector_clock a({1, 2}), b({1, 2, 0, 0});
  CHECK(a == b);
  vector_clock c({1, 2, 1});
  CHECK(a.happened_before(c));
  CHECK(a.at(7) == 0);
  CHECK(c.to_string() == "[1,2,1]");
}
