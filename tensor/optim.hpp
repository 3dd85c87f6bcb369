// Inner optimizer (AdamW with warmup, cosine decay and global-norm clipping) and outer
// optimizer (SGD with Nesterov momentum), both single loops over flat buffers or spans.
//
// Defaults are the published Decoupled DiLoCo ones (docs/config.md). The AdamW state (m, v) and the
// outer momentum share the parameter layout, so a fragment's optimizer state is the same spans as
// its values.
#pragma once

#include <cstdint>

#include "base/status.hpp"
#include "tensor/params.hpp"

namespace diloco {

struct adamw_config {
  double lr = 4e-4;  // peak learning rate
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;   // decoupled, applied to every parameter (as torch.optim.AdamW)
  double clip_norm = 1.0;      // global gradient norm bound; 0 disables clipping
  int64_t warmup_steps = 100;  // linear ramp from 0 to lr
  int64_t total_steps = 2000;  // cosine decay from lr to lr * min_lr_ratio at this step
  double min_lr_ratio = 0.1;

  status validate() const;
  // The learning rate of step `step` (0-based): warmup, then cosine, then held at the floor.
  double lr_at(int64_t step) const;

  // Every setting the same (a step computed ahead with these is the step asked for).
  bool same_as(const adamw_config& o) const {
    return lr == o.lr && beta1 == o.beta1 && beta2 == o.beta2 && eps == o.eps &&
           weight_decay == o.weight_decay && clip_norm == o.clip_norm &&
           warmup_steps == o.warmup_steps && total_steps == o.total_steps &&
           min_lr_ratio == o.min_lr_ratio;
  }
};

// Scales grads so that their global L2 norm is at most max_norm; returns the norm before.
double clip_grad_norm(fspan grads, double max_norm);

// The AdamW moments, in the parameter layout.
struct adamw_state {
  float_buffer m;
  float_buffer v;
  int64_t step = 0;  // number of updates applied

  explicit adamw_state(size_t size = 0) : m(size), v(size) {}
};

// One AdamW update of params from grads (already clipped) at learning rate `lr`; advances
// state.step, which counts updates since the moments were last zeroed (bias correction).
void adamw_update(fspan params, cfspan grads, adamw_state& state, const adamw_config& config,
                  double lr);

struct nesterov_config {
  double lr = 0.7;
  double momentum = 0.9;

  status validate() const;
};

// Outer step on one span: buf = mu*buf + delta; theta -= lr * (delta + mu*buf).
// In the steps below, `update` may be `delta`'s buffer: element i of delta is read before
// element i of update is written.
// delta is the merged outer gradient (old global minus learners' values).
void nesterov_update(fspan theta, fspan momentum_buf, cfspan delta, const nesterov_config& config);

// The same step without applying it: buf = mu*buf + delta; update = -lr * (delta + mu*buf).
// theta + update equals what nesterov_update computes, bit for bit.
void nesterov_step(fspan update, fspan momentum_buf, cfspan delta, const nesterov_config& config);

// A share of one Nesterov step, for a merge of some of a round's learners: with the buffer as
// it was at the round's start, update = -lr * share * (delta + mu * (mu*buf + delta)), and
// round_delta += share * delta. The buffer itself advances once per round
// (nesterov_commit_round). Partial steps whose shares sum to 1 over deltas that average
// linearly move theta as far as one nesterov_step on the round's whole average.
void nesterov_partial_step(fspan update, cfspan momentum_buf, fspan round_delta, cfspan delta,
                           double share, const nesterov_config& config);

// The end of a round of partial steps: buf = mu*buf + round_delta; round_delta = 0.
void nesterov_commit_round(fspan momentum_buf, fspan round_delta, const nesterov_config& config);

}  // namespace diloco
