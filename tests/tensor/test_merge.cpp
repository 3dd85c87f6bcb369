#include <cmath>
#include <cstring>
#include <limits>
#include <vector>
#include "tests/catch.hpp"

#include "base/job_pool.hpp"
#include "tensor/fragment.hpp"
#include "tensor/merge.hpp"
#include "tensor/rng.hpp"

using namespace diloco;

namespace {

std::vector<float> random_vec(rng& g, size_t n, double scale = 1.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(g.normal() * scale);
  return v;
}

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

local_ranges whole(size_t n) {
  return {{0, n}};
}

// Independent double-precision RDA for comparison.
std::vector<double> reference_rda(const std::vector<std::vector<float>>& v,
                                  const std::vector<double>& w) {
  const size_t n = v[0].size();
  double wsum = 0, radius = 0;
  std::vector<double> dir(n, 0.0);
  for (size_t i = 0; i < v.size(); ++i) {
    if (w[i] == 0) continue;
    const double nv = norm(v[i]);
    wsum += w[i];
    radius += w[i] * nv;
    for (size_t j = 0; j < n; ++j) dir[j] += w[i] * v[i][j] / nv;
  }
  radius /= wsum;
  double dn = 0;
  for (double x : dir) dn += x * x;
  dn = std::sqrt(dn);
  for (double& x : dir) x = radius * x / dn;
  return dir;
}

}  // namespace

TEST_CASE("merge: token weight is tokens^2 / steps") {
  CHECK(token_weight(6400, 100) == Approx(409600.0));
  CHECK(token_weight(0, 0) == 0.0);
  CHECK(token_weight(100, 0) == 0.0);
  // Same steps, twice the batch: four times the weight (work amount x work per step).
  CHECK(token_weight(200, 10) == Approx(4 * token_weight(100, 10)));
}

TEST_CASE("merge: RDA of equal-norm inputs keeps the norm") {
  rng g(1);
  const size_t n = 1000;
  std::vector<std::vector<float>> v;
  for (int i = 0; i < 5; ++i) {
    auto x = random_vec(g, n);
    const double s = 3.0 / norm(x);
    for (auto& e : x) e = static_cast<float>(e * s);
    v.push_back(x);
  }
  std::vector<merge_input> in;
  for (int i = 0; i < 5; ++i) in.push_back({cfspan(v[i].data(), n), 1.0 + i});
  std::vector<float> out(n);
  REQUIRE(merge(merge_rule::rda, span<const merge_input>(in.data(), in.size()), whole(n),
                fspan(out.data(), n))
              .ok());
  CHECK(norm(out) == Approx(3.0).epsilon(1e-5));
  // Plain weighted averaging of the same inputs shrinks the norm (directions disagree).
  std::vector<float> avg(n);
  REQUIRE(merge(merge_rule::weighted_average, span<const merge_input>(in.data(), in.size()),
                whole(n), fspan(avg.data(), n))
              .ok());
  CHECK(norm(avg) < 2.0);
}

TEST_CASE("merge: RDA matches an independent double-precision reference") {
  rng g(2);
  const size_t n = 9000;  // several blocks
  std::vector<std::vector<float>> v;
  std::vector<double> w = {1.0, 0.5, 2.0, 0.0, 3.0};
  for (size_t i = 0; i < w.size(); ++i) v.push_back(random_vec(g, n, 1.0 + i));
  std::vector<merge_input> in;
  for (size_t i = 0; i < w.size(); ++i) in.push_back({cfspan(v[i].data(), n), w[i]});
  std::vector<float> out(n);
  REQUIRE(merge(merge_rule::rda, span<const merge_input>(in.data(), in.size()), whole(n),
                fspan(out.data(), n))
              .ok());
  const auto ref = reference_rda(v, w);
  for (size_t j = 0; j < n; ++j) REQUIRE(out[j] == Approx(ref[j]).epsilon(1e-4).margin(1e-6));
}

TEST_CASE("merge: one input returns itself under every rule") {
  rng g(3);
  const size_t n = 300;
  auto v = random_vec(g, n);
  merge_input in{cfspan(v.data(), n), 7.0};
  for (auto rule : {merge_rule::rda, merge_rule::weighted_average, merge_rule::plain_average}) {
    std::vector<float> out(n);
    REQUIRE(merge(rule, span<const merge_input>(&in, 1), whole(n), fspan(out.data(), n)).ok());
    CHECK(out == v);  // exactly
  }
}

TEST_CASE("merge: weights are normalized (weighted average of constants)") {
  const size_t n = 10;
  std::vector<float> a(n, 1.0f), b(n, 4.0f);
  std::vector<merge_input> in = {{cfspan(a.data(), n), 3.0}, {cfspan(b.data(), n), 1.0}};
  std::vector<float> out(n);
  REQUIRE(merge(merge_rule::weighted_average, span<const merge_input>(in.data(), 2), whole(n),
                fspan(out.data(), n))
              .ok());
  for (float x : out) CHECK(x == Approx(1.75));  // (3*1 + 1*4) / 4
  REQUIRE(merge(merge_rule::plain_average, span<const merge_input>(in.data(), 2), whole(n),
                fspan(out.data(), n))
              .ok());
  for (float x : out) CHECK(x == Approx(2.5));
}

TEST_CASE("merge: zero-weight inputs do not count, even if they hold garbage") {
  rng g(4);
  const size_t n = 100;
  auto a = random_vec(g, n), b = random_vec(g, n);
  std::vector<float> junk(n, std::numeric_limits<float>::quiet_NaN());
  for (auto rule : {merge_rule::rda, merge_rule::weighted_average, merge_rule::plain_average}) {
    std::vector<merge_input> two = {{cfspan(a.data(), n), 1.0}, {cfspan(b.data(), n), 2.0}};
    std::vector<merge_input> three = {two[0], {cfspan(junk.data(), n), 0.0}, two[1]};
    std::vector<float> o2(n), o3(n);
    REQUIRE(
        merge(rule, span<const merge_input>(two.data(), 2), whole(n), fspan(o2.data(), n)).ok());
    REQUIRE(
        merge(rule, span<const merge_input>(three.data(), 3), whole(n), fspan(o3.data(), n)).ok());
    CHECK(o2 == o3);
  }
}

TEST_CASE("merge: NaN or Inf inputs are rejected with the input's index") {
  rng g(5);
  const size_t n = 5000;
  auto a = random_vec(g, n), b = random_vec(g, n);
  b[4321] = std::numeric_limits<float>::infinity();
  std::vector<merge_input> in = {{cfspan(a.data(), n), 1.0}, {cfspan(b.data(), n), 1.0}};
  for (auto rule : {merge_rule::rda, merge_rule::weighted_average, merge_rule::plain_average}) {
    std::vector<float> out(n);
    auto st = merge(rule, span<const merge_input>(in.data(), 2), whole(n), fspan(out.data(), n));
    REQUIRE_FALSE(st.ok());
    CHECK(st.code() == errc::non_finite);
    CHECK(st.message().find("input 1") != std::string::npos);
  }
  b[4321] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out(n);
  CHECK(
      merge(merge_rule::rda, span<const merge_input>(in.data(), 2), whole(n), fspan(out.data(), n))
          .code() == errc::non_finite);
}

TEST_CASE("merge: bad weights, sizes and empty quorums are errors") {
  const size_t n = 4;
  std::vector<float> a(n, 1.0f), shorter(n - 1, 1.0f), out(n);
  std::vector<merge_input> neg = {{cfspan(a.data(), n), -1.0}};
  CHECK_FALSE(
      merge(merge_rule::rda, span<const merge_input>(neg.data(), 1), whole(n), fspan(out.data(), n))
          .ok());
  std::vector<merge_input> nan_w = {{cfspan(a.data(), n), std::nan("")}};
  CHECK_FALSE(merge(merge_rule::rda, span<const merge_input>(nan_w.data(), 1), whole(n),
                    fspan(out.data(), n))
                  .ok());
  std::vector<merge_input> wrong = {{cfspan(shorter.data(), n - 1), 1.0}};
  CHECK(merge(merge_rule::rda, span<const merge_input>(wrong.data(), 1), whole(n),
              fspan(out.data(), n))
            .code() == errc::shape_mismatch);
  std::vector<merge_input> none = {{cfspan(a.data(), n), 0.0}};
  CHECK_FALSE(merge(merge_rule::rda, span<const merge_input>(none.data(), 1), whole(n),
                    fspan(out.data(), n))
                  .ok());
}

TEST_CASE("merge: a fragment averages its embedding spans and uses RDA on the rest") {
  fragment f;
  f.spans = {{0, 4, true}, {100, 6, false}};
  f.size = 10;
  std::vector<float> a = {1, 1, 1, 1, 3, 0, 0, 0, 0, 0};
  std::vector<float> b = {3, 3, 3, 3, 0, 3, 0, 0, 0, 0};
  std::vector<merge_input> in = {{cfspan(a.data(), 10), 1.0}, {cfspan(b.data(), 10), 1.0}};
  std::vector<float> out(10);
  REQUIRE(merge_fragment(f, merge_rule::rda, span<const merge_input>(in.data(), 2),
                         fspan(out.data(), 10))
              .ok());
  for (int j = 0; j < 4; ++j) CHECK(out[j] == Approx(2.0));  // weighted average
  // Body: both have norm 3, orthogonal: RDA keeps norm 3 along the diagonal.
  CHECK(out[4] == Approx(3.0 / std::sqrt(2.0)));
  CHECK(out[5] == Approx(3.0 / std::sqrt(2.0)));
  CHECK(parse_merge_rule("rda").ok());
  CHECK_FALSE(parse_merge_rule("median").ok());
}

TEST_CASE("merge: RDA runs per tensor, each tensor's slice against the reference") {
  // Three tensors in one fragment: an embedding (averaged), and two bodies of very different
  // scales, one of them in two pieces. Per tensor, RDA must equal the reference on that tensor
  // alone; over the whole body at once it would not (the large tensor would set the radius).
  rng g(31);
  fragment f;
  f.spans = {{0, 8, true, 0}, {50, 40, false, 1}, {200, 30, false, 2}, {300, 20, false, 1}};
  f.size = 98;
  std::vector<std::vector<float>> v;
  for (int i = 0; i < 3; ++i) {
    auto x = random_vec(g, 98);
    for (size_t j = 48; j < 78; ++j) x[j] *= 100.0f;  // tensor 2: much larger
    v.push_back(x);
  }
  const std::vector<double> w = {1.0, 2.0, 0.5};
  std::vector<merge_input> in;
  for (int i = 0; i < 3; ++i) in.push_back({cfspan(v[i].data(), 98), w[i]});
  std::vector<float> out(98);
  std::vector<tensor_agreement> agreement;
  REQUIRE(merge_fragment(f, merge_rule::rda, span<const merge_input>(in.data(), 3),
                         fspan(out.data(), 98), &agreement)
              .ok());
  // Tensor 1 is local ranges [8, 48) and [78, 98); tensor 2 is [48, 78).
  auto slice = [&](const std::vector<std::pair<size_t, size_t>>& ranges) {
    std::vector<std::vector<float>> s(3);
    for (int i = 0; i < 3; ++i)
      for (const auto& [b, e] : ranges) s[i].insert(s[i].end(), v[i].begin() + b, v[i].begin() + e);
    return s;
  };
  for (const auto& ranges : {std::vector<std::pair<size_t, size_t>>{{8, 48}, {78, 98}},
                             std::vector<std::pair<size_t, size_t>>{{48, 78}}}) {
    const auto ref = reference_rda(slice(ranges), w);
    size_t k = 0;
    for (const auto& [b, e] : ranges) {
      for (size_t j = b; j < e; ++j, ++k) {
        INFO("value " << j);
        CHECK(out[j] == Approx(ref[k]).epsilon(1e-5));
      }
    }
  }
  // One mean cosine per body tensor, in the order the tensors come; random vectors are nearly
  // orthogonal.
  REQUIRE(agreement.size() == 2);
  CHECK(agreement[0].tensor == 1);
  CHECK(agreement[1].tensor == 2);
  for (const auto& a : agreement) CHECK(std::fabs(a.cosine) < 0.5f);
}

TEST_CASE("merge: the per-tensor cosine is 1 for agreeing deltas, -1 for opposed, 0 for one") {
  fragment f;
  f.spans = {{0, 3, false, 4}};
  f.size = 3;
  std::vector<float> a = {1, 2, 3}, twice = {2, 4, 6}, opposed = {-1, -2, -3};
  auto cosine_of = [&](const std::vector<float>& b, double wb) {
    std::vector<merge_input> in = {{cfspan(a.data(), 3), 1.0}, {cfspan(b.data(), 3), wb}};
    std::vector<float> out(3);
    std::vector<tensor_agreement> agreement;
    REQUIRE(merge_fragment(f, merge_rule::weighted_average, span<const merge_input>(in.data(), 2),
                           fspan(out.data(), 3), &agreement)
                .ok());
    return agreement;
  };
  REQUIRE(cosine_of(twice, 1.0).size() == 1);
  CHECK(cosine_of(twice, 1.0)[0].tensor == 4);
  CHECK(cosine_of(twice, 1.0)[0].cosine == Approx(1.0f));
  CHECK(cosine_of(opposed, 1.0)[0].cosine == Approx(-1.0f));
  // One counted input: nothing to compare.
  CHECK(cosine_of(twice, 0.0).empty());
}

TEST_CASE("merge: a large fragment merged with a pool's help is the same to the bit") {
  // Two body tensors over 1M floats each (one of them in two pieces, ending inside a block) and
  // an embedding: RDA with cosines and the weighted average, with and without a pool of two
  // workers beside the calling thread.
  rng g(77);
  const size_t a = (size_t{1} << 20) + 1234, b = 700001, c = (size_t{1} << 19) + 3;
  fragment f;
  f.spans = {
      {0, 5000, true, 0}, {10000, a, false, 1}, {5000000, b, false, 2}, {9000000, c, false, 1}};
  f.size = 5000 + a + b + c;
  std::vector<std::vector<float>> v;
  for (int i = 0; i < 3; ++i) v.push_back(random_vec(g, f.size));
  const std::vector<double> w = {1.0, 3.0, 0.5};
  std::vector<merge_input> in;
  for (int i = 0; i < 3; ++i) in.push_back({cfspan(v[i].data(), f.size), w[i]});
  job_pool pool(2);
  for (auto rule : {merge_rule::rda, merge_rule::weighted_average}) {
    INFO(to_string(rule));
    std::vector<float> alone(f.size), helped(f.size);
    std::vector<tensor_agreement> agree_alone, agree_helped;
    REQUIRE(merge_fragment(f, rule, span<const merge_input>(in.data(), 3),
                           fspan(alone.data(), f.size), &agree_alone)
                .ok());
    for (int round = 0; round < 3; ++round) {
      REQUIRE(merge_fragment(f, rule, span<const merge_input>(in.data(), 3),
                             fspan(helped.data(), f.size), &agree_helped, &pool)
                  .ok());
      CHECK(std::memcmp(alone.data(), helped.data(), f.size * 4) == 0);
      REQUIRE(agree_alone.size() == agree_helped.size());
      for (size_t t = 0; t < agree_alone.size(); ++t) {
        CHECK(agree_alone[t].tensor == agree_helped[t].tensor);
        CHECK(agree_alone[t].cosine == agree_helped[t].cosine);
      }
    }
  }
  // A non-finite input is still found and named with the pool.
  v[2][5000 + a + 17] = std::numeric_limits<float>::infinity();
  std::vector<float> out(f.size);
  const auto st = merge_fragment(f, merge_rule::rda, span<const merge_input>(in.data(), 3),
                                 fspan(out.data(), f.size), nullptr, &pool);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("merge input 2"));
}
