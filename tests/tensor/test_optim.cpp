#include "tests/catch.hpp"
#include <cmath>
#include <vector>

#include "tensor/optim.hpp"

using namespace diloco;

TEST_CASE("optim: warmup then cosine decay to the floor") {
  adamw_config c;
  c.lr = 1.0;
  c.warmup_steps = 10;
  c.total_steps = 110;
  c.min_lr_ratio = 0.1;
  CHECK(c.lr_at(0) == Approx(0.1));
  CHECK(c.lr_at(4) == Approx(0.5));
  CHECK(c.lr_at(9) == Approx(1.0));
  CHECK(c.lr_at(10) == Approx(1.0));
  CHECK(c.lr_at(60) == Approx(0.55));  // half way through the cosine
  CHECK(c.lr_at(109) == Approx(0.1).margin(1e-3));
  CHECK(c.lr_at(110) == Approx(0.1));
  CHECK(c.lr_at(100000) == Approx(0.1));
  for (int s = 11; s < 110; ++s) CHECK(c.lr_at(s) <= c.lr_at(s - 1));
}

TEST_CASE("optim: clipping scales to the bound and leaves small gradients alone") {
  std::vector<float> g = {3.0f, 4.0f};
  CHECK(clip_grad_norm(fspan(g.data(), 2), 1.0) == Approx(5.0));
  CHECK(std::hypot(g[0], g[1]) == Approx(1.0).epsilon(1e-5));
  CHECK(g[0] / g[1] == Approx(0.75));
  std::vector<float> small = {0.3f, 0.4f};
  CHECK(clip_grad_norm(fspan(small.data(), 2), 1.0) == Approx(0.5));
  CHECK(small[0] == 0.3f);
  std::vector<float> off = {30.0f, 40.0f};
  clip_grad_norm(fspan(off.data(), 2), 0.0);
  CHECK(off[1] == 40.0f);
}

TEST_CASE("optim: AdamW matches an independent double-precision reference") {
  adamw_config c;
  c.lr = 0.01;
  c.warmup_steps = 0;
  c.total_steps = 1000000;
  c.min_lr_ratio = 1.0;  // constant lr
  c.weight_decay = 0.1;
  const int n = 3;
  std::vector<float> p = {0.5f, -1.0f, 2.0f};
  adamw_state st(n);
  std::vector<double> rp = {0.5, -1.0, 2.0}, rm(n, 0), rv(n, 0);
  const double grads[3][3] = {{0.1, -0.2, 0.3}, {0.05, 0.4, -0.1}, {-0.3, 0.0, 0.2}};
  for (int t = 1; t <= 3; ++t) {
    std::vector<float> g(grads[t - 1], grads[t - 1] + 3);
    adamw_update(fspan(p.data(), n), cfspan(g.data(), n), st, c, c.lr_at(st.step));
    for (int i = 0; i < n; ++i) {
      rm[i] = 0.9 * rm[i] + 0.1 * grads[t - 1][i];
      rv[i] = 0.95 * rv[i] + 0.05 * grads[t - 1][i] * grads[t - 1][i];
      const double mhat = rm[i] / (1 - std::pow(0.9, t));
      const double vhat = rv[i] / (1 - std::pow(0.95, t));
      rp[i] = rp[i] - 0.01 * 0.1 * rp[i] - 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
    }
  }
  CHECK(st.step == 3);
  for (int i = 0; i < n; ++i) CHECK(p[i] == Approx(rp[i]).epsilon(1e-5));
}

TEST_CASE("optim: Nesterov outer step matches buf = mu buf + d, theta -= lr (d + mu buf)") {
  nesterov_config c;  // lr 0.7, mu 0.9
  std::vector<float> theta = {1.0f, 2.0f}, buf = {0.0f, 0.0f};
  const std::vector<float> d1 = {0.1f, -0.2f}, d2 = {0.3f, 0.1f};
  nesterov_update(fspan(theta.data(), 2), fspan(buf.data(), 2), cfspan(d1.data(), 2), c);
  // buf = d1; theta -= 0.7 * (d1 + 0.9 d1)
  CHECK(buf[0] == Approx(0.1));
  CHECK(theta[0] == Approx(1.0 - 0.7 * 1.9 * 0.1));
  CHECK(theta[1] == Approx(2.0 + 0.7 * 1.9 * 0.2));
  nesterov_update(fspan(theta.data(), 2), fspan(buf.data(), 2), cfspan(d2.data(), 2), c);
  const double b0 = 0.9 * 0.1 + 0.3;
  CHECK(buf[0] == Approx(b0));
  CHECK(theta[0] == Approx(1.0 - 0.7 * 1.9 * 0.1 - 0.7 * (0.3 + 0.9 * b0)));
}

TEST_CASE("optim: nesterov_step's update added to theta equals nesterov_update bit for bit") {
  nesterov_config c;
  std::vector<float> a = {0.3f, -1.7f, 2.5f}, b = a, buf_a(3, 0.1f), buf_b(3, 0.1f), u(3);
  const std::vector<float> d = {0.01f, -0.02f, 0.3f};
  for (int round = 0; round < 3; ++round) {
    nesterov_update(fspan(a.data(), 3), fspan(buf_a.data(), 3), cfspan(d.data(), 3), c);
    nesterov_step(fspan(u.data(), 3), fspan(buf_b.data(), 3), cfspan(d.data(), 3), c);
    for (int i = 0; i < 3; ++i) b[i] += u[i];
  }
  CHECK(a == b);
  CHECK(buf_a == buf_b);
}

TEST_CASE("optim: partial steps whose shares sum to one move theta as one Nesterov step") {
  nesterov_config c;  // lr 0.7, mu 0.9
  const size_t n = 4;
  // Three learners' deltas with token weights; the round's merge is their weighted average.
  const std::vector<std::vector<float>> deltas = {
      {0.1f, -0.2f, 0.05f, 0.3f}, {0.2f, 0.1f, -0.1f, 0.0f}, {-0.3f, 0.4f, 0.2f, 0.1f}};
  const std::vector<double> w = {1.0, 2.0, 1.5};
  const double total = w[0] + w[1] + w[2];
  std::vector<float> avg(n, 0.0f);
  for (size_t k = 0; k < 3; ++k)
    for (size_t i = 0; i < n; ++i) avg[i] += static_cast<float>(w[k] / total) * deltas[k][i];
  const std::vector<float> buf0 = {0.05f, -0.1f, 0.2f, 0.0f};

  // One whole round: one step on the average.
  std::vector<float> full_buf = buf0, full_u(n);
  nesterov_step(fspan(full_u.data(), n), fspan(full_buf.data(), n), cfspan(avg.data(), n), c);

  // The same round as three merges of one learner each (K = 1): each moves theta by its share.
  std::vector<float> buf = buf0, acc(n, 0.0f), u(n), moved(n, 0.0f);
  for (size_t k = 0; k < 3; ++k) {
    nesterov_partial_step(fspan(u.data(), n), cfspan(buf.data(), n), fspan(acc.data(), n),
                          cfspan(deltas[k].data(), n), w[k] / total, c);
    CHECK(buf == buf0);  // the buffer waits for the round's end
    for (size_t i = 0; i < n; ++i) moved[i] += u[i];
  }
  nesterov_commit_round(fspan(buf.data(), n), fspan(acc.data(), n), c);
  for (size_t i = 0; i < n; ++i) {
    CHECK(moved[i] == Approx(full_u[i]).margin(1e-6));
    CHECK(buf[i] == Approx(full_buf[i]).margin(1e-6));
    CHECK(acc[i] == 0.0f);
  }
  // Half the round's weight moves theta half as far from the same buffer.
  std::vector<float> half_u(n), half_acc(n, 0.0f);
  nesterov_partial_step(fspan(half_u.data(), n), cfspan(buf0.data(), n), fspan(half_acc.data(), n),
                        cfspan(avg.data(), n), 0.5, c);
  for (size_t i = 0; i < n; ++i) CHECK(half_u[i] == Approx(0.5 * full_u[i]).margin(1e-6));
}

TEST_CASE("optim: with momentum 0 and lr 1 the outer step applies the averaged delta exactly") {
  nesterov_config c;
  c.lr = 1.0;
  c.momentum = 0.0;
  std::vector<float> theta = {1.0f, -1.0f}, buf(2, 0.0f);
  const std::vector<float> d = {0.25f, -0.5f};
  nesterov_update(fspan(theta.data(), 2), fspan(buf.data(), 2), cfspan(d.data(), 2), c);
  CHECK(theta[0] == 0.75f);
  CHECK(theta[1] == -0.5f);
}

TEST_CASE("optim: config validation rejects out-of-range values with the field name") {
  adamw_config a;
  a.beta2 = 1.0;
  CHECK(a.validate().message().find("inner.beta2") != std::string::npos);
  a = adamw_config{};
  a.lr = -1;
  CHECK_FALSE(a.validate().ok());
  nesterov_config n;
  n.momentum = 1.0;
  CHECK(n.validate().message().find("outer.momentum") != std::string::npos);
  CHECK(adamw_config{}.validate().ok());
  CHECK(nesterov_config{}.validate().ok());
}
