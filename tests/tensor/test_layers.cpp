// Every layer's backward against central finite differences, in double precision.
#include "tests/catch.hpp"
#include <cmath>
#include <functional>
#include <vector>

#include "tensor/layers.hpp"
#include "tensor/rng.hpp"

using namespace diloco;
using vec = std::vector<double>;

namespace {

vec random_vec(rng& g, size_t n, double scale = 1.0) {
  vec v(n);
  for (auto& x : v) x = g.normal() * scale;
  return v;
}

// Checks analytic d(loss)/d(x) against (loss(x+h) - loss(x-h)) / 2h for every coordinate.
void check_gradient(vec& x, const vec& analytic, const std::function<double()>& loss) {
  REQUIRE(x.size() == analytic.size());
  constexpr double h = 1e-6;
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    const double numeric = (up - down) / (2 * h);
    INFO("coordinate " << i);
    REQUIRE(analytic[i] == Approx(numeric).epsilon(1e-6).margin(1e-8));
  }
}

double dot(const vec& a, const vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

TEST_CASE("layers: linear backward matches finite differences") {
  rng g(1);
  const int B = 3, I = 5, O = 4;
  vec in = random_vec(g, B * I), w = random_vec(g, I * O), b = random_vec(g, O);
  const vec r = random_vec(g, B * O);  // loss = <out, r>, so dout = r
  vec out(B * O);
  auto loss = [&] {
    layers::linear_forward(out.data(), in.data(), w.data(), b.data(), B, I, O);
    return dot(out, r);
  };
  vec din(B * I), dw(I * O, 0.0), db(O, 0.0);
  layers::linear_backward(din.data(), dw.data(), db.data(), r.data(), in.data(), w.data(), B, I, O);
  check_gradient(in, din, loss);
  check_gradient(w, dw, loss);
  check_gradient(b, db, loss);
}

TEST_CASE("layers: linear backward accumulates parameter gradients and may skip din") {
  rng g(2);
  const int B = 2, I = 3, O = 2;
  vec in = random_vec(g, B * I), w = random_vec(g, I * O), dout = random_vec(g, B * O);
  vec dw1(I * O, 0.0), db1(O, 0.0), dw2(I * O, 0.0), db2(O, 0.0);
  layers::linear_backward<double>(nullptr, dw1.data(), db1.data(), dout.data(), in.data(), w.data(),
                                  B, I, O);
  layers::linear_backward<double>(nullptr, dw2.data(), db2.data(), dout.data(), in.data(), w.data(),
                                  B, I, O);
  layers::linear_backward<double>(nullptr, dw2.data(), db2.data(), dout.data(), in.data(), w.data(),
                                  B, I, O);
  for (size_t i = 0; i < dw1.size(); ++i) CHECK(dw2[i] == Approx(2 * dw1[i]));
  for (size_t i = 0; i < db1.size(); ++i) CHECK(db2[i] == Approx(2 * db1[i]));
}

TEST_CASE("layers: tanh backward matches finite differences") {
  rng g(3);
  const int N = 17;
  vec in = random_vec(g, N, 1.5);
  const vec r = random_vec(g, N);
  vec out(N);
  auto loss = [&] {
    layers::tanh_forward(out.data(), in.data(), N);
    return dot(out, r);
  };
  loss();
  vec din(N);
  layers::tanh_backward(din.data(), r.data(), out.data(), N);
  check_gradient(in, din, loss);
  for (int i = 0; i < N; ++i) CHECK(out[i] == Approx(std::tanh(in[i])));
}

TEST_CASE("layers: softmax cross-entropy value and backward") {
  rng g(4);
  const int B = 4, V = 7;
  vec logits = random_vec(g, B * V, 2.0);
  const uint8_t targets[B] = {0, 6, 3, 3};
  vec probs(B * V);
  auto loss = [&] {
    return layers::softmax_xent_forward(probs.data(), logits.data(), targets, B, V);
  };

  // Reference value computed independently with log-sum-exp in double.
  double expect = 0;
  for (int b = 0; b < B; ++b) {
    double mx = -1e300, s = 0;
    for (int v = 0; v < V; ++v) mx = std::max(mx, logits[b * V + v]);
    for (int v = 0; v < V; ++v) s += std::exp(logits[b * V + v] - mx);
    expect += -(logits[b * V + targets[b]] - mx - std::log(s));
  }
  CHECK(loss() == Approx(expect / B).epsilon(1e-12));
  for (int b = 0; b < B; ++b) {
    double row = 0;
    for (int v = 0; v < V; ++v) row += probs[b * V + v];
    CHECK(row == Approx(1.0));
  }
  vec dlogits(B * V);
  layers::softmax_xent_backward(dlogits.data(), probs.data(), targets, B, V);
  check_gradient(logits, dlogits, loss);
}

// Equal up to rounding, not bit for bit: Eigen evaluates the unaligned head of a row with the
// scalar exp and the rest with the vectorized one, so two allocations of different alignment
// may differ in the last bit. Training buffers are always 64-byte aligned, so runs repeat exactly.
TEST_CASE("layers: softmax works in place (probs aliasing logits)") {
  rng g(6);
  const int B = 3, V = 5;
  const vec logits = random_vec(g, B * V);
  const uint8_t targets[B] = {1, 4, 0};
  vec separate(B * V), inplace = logits;
  const double a = layers::softmax_xent_forward(separate.data(), logits.data(), targets, B, V);
  const double b = layers::softmax_xent_forward(inplace.data(), inplace.data(), targets, B, V);
  CHECK(a == Approx(b).epsilon(1e-14));
  for (size_t i = 0; i < separate.size(); ++i)
    CHECK(separate[i] == Approx(inplace[i]).epsilon(1e-14));
}

TEST_CASE("layers: embedding backward matches finite differences, with repeated tokens") {
  rng g(5);
  const int B = 3, C = 2, E = 4, V = 5;
  vec table = random_vec(g, V * E);
  const uint8_t tokens[B * C] = {1, 3, 3, 3, 0, 1};  // token 3 three times, 2 and 4 never
  const vec r = random_vec(g, B * C * E);
  vec out(B * C * E);
  auto loss = [&] {
    layers::embedding_forward(out.data(), tokens, table.data(), B, C, E);
    return dot(out, r);
  };
  vec dtable(V * E, 0.0);
  layers::embedding_backward(dtable.data(), r.data(), tokens, B, C, E);
  check_gradient(table, dtable, loss);
  for (int e = 0; e < E; ++e) {
    CHECK(dtable[2 * E + e] == 0.0);
    CHECK(dtable[4 * E + e] == 0.0);
  }
}
