#include "tensor/optim.hpp"

#include <cmath>
#include <string>

#include "base/check.hpp"
#include "tensor/reduce.hpp"

namespace diloco {

namespace {
constexpr double pi = 3.14159265358979323846;

status bad(const char* field, const std::string& what) {
  return status(errc::invalid_argument, std::string(field) + ": " + what);
}
}  // namespace

status adamw_config::validate() const {
  if (!(lr > 0 && lr <= 1)) return bad("inner.lr", "must be in (0, 1]");
  if (!(beta1 >= 0 && beta1 < 1)) return bad("inner.beta1", "must be in [0, 1)");
  if (!(beta2 >= 0 && beta2 < 1)) return bad("inner.beta2", "must be in [0, 1)");
  // The update runs in float: an eps below ~1e-30 vanishes there (1e-50 is 0, and 0/0 is NaN).
  if (!(eps >= 1e-30 && eps < 1)) return bad("inner.eps", "must be in [1e-30, 1)");
  if (!(weight_decay >= 0 && weight_decay < 10))
    return bad("inner.weight_decay", "must be in [0, 10)");
  // Decoupled decay multiplies every weight by 1 - lr * weight_decay each step: at 1 or more
  // it zeroes or flips every weight, and the run diverges whatever the data.
  if (lr * weight_decay >= 1) {
    return bad("inner.weight_decay",
               "inner.lr x inner.weight_decay = " + std::to_string(lr * weight_decay) +
                   " must be below 1 (each step scales the weights by 1 - lr x "
                   "weight_decay)");
  }
  if (!(clip_norm >= 0 && clip_norm <= 1e9))
    return bad("inner.clip_norm", "must be in [0, 1e9] (0 disables clipping)");
  if (warmup_steps < 0) return bad("inner.warmup_steps", "must be >= 0");
  if (total_steps < 1) return bad("inner.total_steps", "must be >= 1");
  if (!(min_lr_ratio >= 0 && min_lr_ratio <= 1))
    return bad("inner.min_lr_ratio", "must be in [0, 1]");
  return {};
}

double adamw_config::lr_at(int64_t step) const {
  DILOCO_CHECK(step >= 0, "optim: the lr of a step that exists");
  if (step < warmup_steps)
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const int64_t decay_steps = total_steps - warmup_steps;
  if (decay_steps <= 0 || step >= total_steps) return lr * min_lr_ratio;
  const double progress =
      static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(pi * progress));
  return lr * (min_lr_ratio + (1.0 - min_lr_ratio) * cosine);
}

double clip_grad_norm(fspan grads, double max_norm) {
  const double norm = std::sqrt(sum_squares(grads));
  if (max_norm > 0 && norm > max_norm) {
    const auto scale = static_cast<float>(max_norm / (norm + 1e-6));
    for (float& x : grads) x *= scale;
  }
  return norm;
}

namespace {

// The factors of AdamW update number `step` (1 for the first): bias corrections and decay.
struct adamw_factor_set {
  float b1, b2, step_size, inv_bias2, eps, decay;
};
adamw_factor_set adamw_factors(const adamw_config& config, int64_t step, double lr) {
  const auto t = static_cast<double>(step);
  return {static_cast<float>(config.beta1),
          static_cast<float>(config.beta2),
          static_cast<float>(lr / (1.0 - std::pow(config.beta1, t))),
          static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(config.beta2, t))),
          static_cast<float>(config.eps),
          static_cast<float>(1.0 - lr * config.weight_decay)};
}

}  // namespace

void adamw_update(fspan params, cfspan grads, adamw_state& state, const adamw_config& config,
                  double lr) {
  DILOCO_CHECK(params.size() == grads.size(), "optim: a gradient per parameter");
  DILOCO_CHECK(state.m.size() == params.size() && state.v.size() == params.size(),
               "optim: moments per parameter");
  DILOCO_CHECK(lr >= 0.0, "optim: a learning rate not negative");
  state.step += 1;
  const auto [b1, b2, step_size, inv_bias2, eps, decay] = adamw_factors(config, state.step, lr);
  float* p = params.data();
  const float* g = grads.data();
  float* m = state.m.data();
  float* v = state.v.data();
  const size_t n = params.size();
  for (size_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    const float denom = std::sqrt(v[i]) * inv_bias2 + eps;
    p[i] = p[i] * decay - step_size * m[i] / denom;
  }
}

status nesterov_config::validate() const {
  if (!(lr > 0 && lr <= 10)) return bad("outer.lr", "must be in (0, 10]");
  if (!(momentum >= 0 && momentum < 1)) return bad("outer.momentum", "must be in [0, 1)");
  return {};
}

void nesterov_update(fspan theta, fspan momentum_buf, cfspan delta, const nesterov_config& config) {
  DILOCO_CHECK(theta.size() == momentum_buf.size() && theta.size() == delta.size(),
               "optim: Nesterov buffers of one size");
  const auto mu = static_cast<float>(config.momentum);
  const auto lr = static_cast<float>(config.lr);
  float* th = theta.data();
  float* buf = momentum_buf.data();
  const float* d = delta.data();
  const size_t n = theta.size();
  for (size_t i = 0; i < n; ++i) {
    buf[i] = mu * buf[i] + d[i];
    th[i] -= lr * (d[i] + mu * buf[i]);
  }
}

void nesterov_step(fspan update, fspan momentum_buf, cfspan delta, const nesterov_config& config) {
  DILOCO_CHECK(update.size() == momentum_buf.size() && update.size() == delta.size(),
               "optim: Nesterov buffers of one size");
  const auto mu = static_cast<float>(config.momentum);
  const auto lr = static_cast<float>(config.lr);
  float* u = update.data();
  float* buf = momentum_buf.data();
  const float* d = delta.data();
  const size_t n = update.size();
  for (size_t i = 0; i < n; ++i) {
    buf[i] = mu * buf[i] + d[i];
    u[i] = -(lr * (d[i] + mu * buf[i]));
  }
}

void nesterov_partial_step(fspan update, cfspan momentum_buf, fspan round_delta, cfspan delta,
                           double share, const nesterov_config& config) {
  DILOCO_CHECK(update.size() == momentum_buf.size() && update.size() == delta.size() &&
                   update.size() == round_delta.size(),
               "optim: Nesterov buffers of one size");
  const auto mu = static_cast<float>(config.momentum);
  const auto lr = static_cast<float>(config.lr);
  const auto s = static_cast<float>(share);
  float* u = update.data();
  const float* buf = momentum_buf.data();
  float* acc = round_delta.data();
  const float* d = delta.data();
  const size_t n = update.size();
  for (size_t i = 0; i < n; ++i) {
    const float sd = s * d[i];
    acc[i] += sd;
    u[i] = -(lr * (sd + mu * (mu * s * buf[i] + sd)));
  }
}

void nesterov_commit_round(fspan momentum_buf, fspan round_delta, const nesterov_config& config) {
  DILOCO_CHECK(momentum_buf.size() == round_delta.size(),
               "optim: a round's delta per momentum entry");
  const auto mu = static_cast<float>(config.momentum);
  float* buf = momentum_buf.data();
  float* acc = round_delta.data();
  for (size_t i = 0; i < momentum_buf.size(); ++i) {
    buf[i] = mu * buf[i] + acc[i];
    acc[i] = 0.0f;
  }
}

}  // namespace diloco
