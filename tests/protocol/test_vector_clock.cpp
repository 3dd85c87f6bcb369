#include <algorithm>
#include <cmath>
#include <vector>
#include "tests/catch.hpp"

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

namespace {
// The dense clock the shared representation must equal entry for entry and in length.
struct dense_clock {
  std::vector<uint64_t> t;
  void tick(uint32_t i) {
    if (i >= t.size()) t.resize(i + 1, 0);
    ++t[i];
  }
  void merge(const std::vector<uint64_t>& o) {
    if (o.size() > t.size()) t.resize(o.size(), 0);
    for (size_t i = 0; i < o.size(); ++i) t[i] = std::max(t[i], o[i]);
  }
};

// n actors exchange messages at random (a star around actor 0 and some all-to-all traffic,
// messages delivered in any order, some never), checking every clock and every stamp in
// flight against the dense clocks after each event.
void run_exchange(uint64_t seed, uint32_t n, int events, size_t* max_overrides) {
  rng g(seed);
  std::vector<vector_clock> clock(n);
  std::vector<dense_clock> ref(n);
  struct in_flight {
    uint32_t to;
    vector_clock st;
    std::vector<uint64_t> expect;
  };
  std::vector<in_flight> flight;
  for (int e = 0; e < events; ++e) {
    const uint64_t kind = g.below(10);
    if (kind < 5 || flight.empty()) {
      // A send: mostly to and from actor 0 (a syncer), sometimes between any two.
      uint32_t from = static_cast<uint32_t>(g.below(n)), to = 0;
      if (from == 0 || g.below(4) == 0) to = static_cast<uint32_t>(g.below(n));
      clock[from].event(from);
      ref[from].tick(from);
      flight.push_back({to, clock[from], ref[from].t});
      // A broadcast from the syncer now and then: one stamp per learner, each its own event.
      if (from == 0 && g.below(8) == 0) {
        for (uint32_t l = 1; l < n; ++l) {
          clock[0].event(0);
          ref[0].tick(0);
          flight.push_back({l, clock[0], ref[0].t});
        }
      }
    } else {
      const size_t k = g.below(flight.size());
      in_flight m = std::move(flight[k]);
      flight.erase(flight.begin() + static_cast<std::ptrdiff_t>(k));
      if (g.below(20) == 0) continue;     // lost
      REQUIRE(m.st.ticks() == m.expect);  // a stamp never changes after it was made
      clock[m.to].merge(m.st);
      clock[m.to].event(m.to);
      ref[m.to].merge(m.expect);
      ref[m.to].tick(m.to);
      REQUIRE(clock[m.to].ticks() == ref[m.to].t);
      REQUIRE(clock[m.to].size() == ref[m.to].t.size());
      *max_overrides = std::max(*max_overrides, clock[m.to].overrides());
    }
  }
  for (uint32_t a = 0; a < n; ++a) REQUIRE(clock[a].ticks() == ref[a].t);
  for (const auto& m : flight) REQUIRE(m.st.ticks() == m.expect);
}
}  // namespace

TEST_CASE("vector clock: shared bases give the dense clock's values and length, event by event") {
  for (uint32_t n : {2u, 5u, 40u, 300u, 2000u}) {
    size_t max_overrides = 0;
    run_exchange(n, n, n > 1000 ? 12000 : 4000, &max_overrides);
    // After an event, at most about sqrt(length) entries (at least 8) differ from the base.
    INFO("actors " << n);
    CHECK(max_overrides <= std::max<size_t>(8, static_cast<size_t>(2 * std::sqrt(double(n)))));
  }
}

TEST_CASE("vector clock: a copy shares its base, and ticking the original leaves it alone") {
  vector_clock a;
  for (uint32_t i = 0; i < 1000; ++i) a.event(i % 7 == 0 ? 0 : i);
  const vector_clock copy = a;
  a.event(3);
  // A clock of the same run that has seen what `copy` has and more (the shortcuts rely on that:
  // an entry of actor X at least k means X's clock at its event k lies below).
  std::vector<uint64_t> later = copy.ticks();
  later.resize(2000, 1);
  a.merge(vector_clock(later));
  a.event(0);
  CHECK(copy.at(3) == 1);
  CHECK(copy.size() == 1000);
  CHECK(a.at(3) == 2);
  CHECK(a.at(1999) == 1);
  CHECK(a.size() == 2000);
  CHECK(copy.happened_before(a));
}

TEST_CASE("vector clock: a base of unknown origin never shortcuts a merge") {
  // b's base came from outside (a file, the wire): its entry 0 says nothing about the rest.
  vector_clock a;
  a.event(0);
  a.event(0);
  vector_clock b({1, 0, 9});
  b.event(1);
  a.merge(b);
  CHECK(a.ticks() == std::vector<uint64_t>{2, 1, 9});
}

TEST_CASE("vector clock: short clocks stay dense, and a long clock merges a short one") {
  vector_clock longer;
  for (uint32_t i = 0; i < 500; ++i) longer.event(i);
  vector_clock shorter;
  shorter.event(3);
  shorter.event(3);
  shorter.tick(7);
  CHECK(shorter.overrides() == 0);
  longer.merge(shorter);
  CHECK(longer.at(3) == 2);
  CHECK(longer.at(7) == 1);
  CHECK(longer.at(499) == 1);
  CHECK(longer.size() == 500);
  shorter.merge(longer);  // the short one grows past the dense limit
  CHECK(shorter.ticks() == longer.ticks());
  shorter.event(600);
  CHECK(shorter.size() == 601);
  CHECK(shorter.at(600) == 1);
  CHECK(longer.happened_before(shorter));
}
