#include "tests/catch.hpp"
#include <cmath>
#include <vector>

#include "tensor/rng.hpp"

using namespace diloco;

TEST_CASE("rng: the same seed gives the same sequence, another seed another") {
  rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t x = a.next();
    REQUIRE(x == b.next());
    differs = differs || x != c.next();
  }
  CHECK(differs);
}

TEST_CASE("rng: derive_seed separates roles and indices") {
  CHECK(derive_seed(1, "learner", 0) != derive_seed(1, "learner", 1));
  CHECK(derive_seed(1, "learner", 0) != derive_seed(1, "syncer", 0));
  CHECK(derive_seed(1, "learner", 0) != derive_seed(2, "learner", 0));
  CHECK(derive_seed(7, "x", 3) == derive_seed(7, "x", 3));
}

TEST_CASE("rng: state round trip resumes the stream exactly") {
  rng a(9);
  for (int i = 0; i < 10; ++i) a.next();
  rng b;
  b.set_state(a.state());
  for (int i = 0; i < 100; ++i) REQUIRE(a.next() == b.next());
}

TEST_CASE("rng: below() stays in range and is close to uniform") {
  rng g(5);
  constexpr int buckets = 10, draws = 100000;
  std::vector<int> count(buckets, 0);
  for (int i = 0; i < draws; ++i) {
    const uint64_t v = g.below(buckets);
    REQUIRE(v < static_cast<uint64_t>(buckets));
    count[v]++;
  }
  double chi2 = 0;
  const double expect = static_cast<double>(draws) / buckets;
  for (int c : count) chi2 += (c - expect) * (c - expect) / expect;
  CHECK(chi2 < 27.9);  // p = 0.001 for 9 degrees of freedom
}

TEST_CASE("rng: uniform, normal, exponential and gamma have the right moments") {
  rng g(11);
  constexpr int n = 200000;
  double su = 0, sn = 0, sn2 = 0, se = 0, sg = 0;
  for (int i = 0; i < n; ++i) {
    const double u = g.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    su += u;
    const double z = g.normal();
    sn += z;
    sn2 += z * z;
    se += g.exponential(2.0);
    sg += g.gamma(0.3);
  }
  CHECK(su / n == Approx(0.5).margin(0.005));
  CHECK(sn / n == Approx(0.0).margin(0.01));
  CHECK(sn2 / n == Approx(1.0).margin(0.02));
  CHECK(se / n == Approx(0.5).margin(0.01));
  CHECK(sg / n == Approx(0.3).margin(0.01));
  double s3 = 0;
  for (int i = 0; i < n; ++i) s3 += g.gamma(3.5);
  CHECK(s3 / n == Approx(3.5).margin(0.03));
}
