// The built-in MLP's computation without any runtime around it: a model replica, its AdamW
// state and its data cursor. `diloco train` runs it bare; as a learner it is wrapped in the
// learner_compute interface (runtime/builtin_model.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/compute.hpp"
#include "tensor/data.hpp"
#include "tensor/model.hpp"
#include "tensor/optim.hpp"

namespace diloco {

class inner_trainer {
 public:
  // Learner `index` of `learners`; parameters initialized from `seed` (the same for every
  // learner, as all replicas start from one global model), data shard from (seed, index).
  // `restoring`: a saved state is loaded next (persist_fields in runtime/builtin_model.cpp),
  // which sets the parameters and moments: they start empty, nothing is drawn, and the
  // gradients' buffer is not zeroed (a step zeroes it before it computes them).
  inner_trainer(const model_config& model, std::shared_ptr<const data_source> data, int batch,
                uint64_t seed, int index, int learners, bool restoring = false);

  // One inner step: the next batch, forward, backward, clipping, AdamW at the learning rate of
  // schedule step `schedule_step` (by default this learner's own step count).
  step_stats step(const adamw_config& config);
  step_stats step(const adamw_config& config, int64_t schedule_step);
  // step(config, schedule_step) in two halves, for a step computed ahead on another thread
  // (runtime/builtin_model.cpp), with its batch and activations in a scratch of its own:
  struct ahead_scratch {
    mlp_lm::workspace ws;
    std::vector<uint8_t> contexts;  // (B, C)
    std::vector<uint8_t> targets;   // (B)
    data_cursor cursor;
    double loss = 0.0;
    double grad_norm = 0.0;
  };
  ahead_scratch make_scratch() const;
  // The first half, from `params` (this trainer's, or what they will be) and `cursor` (this
  // trainer's): the next batch, forward, backward and clipping, into `s` and the gradients
  // into `grads` (this trainer's own buffer: between steps its gradients are spent, so that
  // computing ahead needs no second model-sized buffer for them; the caller makes sure the
  // update that reads them is done). Reads nothing else of this trainer's.
  void gradients_into(const float_buffer& params, const data_cursor& cursor, double clip_norm,
                      ahead_scratch& s, float_buffer& grads) const;
  // The second half: `s`'s cursor becomes this trainer's, and the step's stats are returned;
  // then update() takes the AdamW step with the gradients, in place, as step() does. Between
  // the two, nothing may read the parameters or moments.
  step_stats adopt(ahead_scratch& s, const adamw_config& config, int64_t schedule_step);
  void update(const adamw_config& config, double lr);
  // The same in two halves, for the data-parallel baseline (gradients averaged in between).
  double compute_gradients();
  step_stats apply_gradients(const adamw_config& config);
  step_stats apply_gradients(const adamw_config& config, int64_t schedule_step);
  double evaluate();

  // A restarted learner: zero AdamW moments (they were lost), continue the lr schedule at
  // `schedule_step`, and read a fresh part of the shard (data order from `data_seed`).
  void restart(int64_t schedule_step, uint64_t data_seed);

  const mlp_lm& model() const { return model_; }
  float_buffer& params() { return params_; }
  const float_buffer& params() const { return params_; }
  adamw_state& optimizer() { return optimizer_; }
  data_cursor& cursor() { return cursor_; }
  int batch() const { return batch_; }
  float_buffer& grads() { return grads_; }
  int64_t steps_done() const { return schedule_offset_ + optimizer_.step; }
  // Gradients computed and not yet applied (compute_gradients until apply_gradients, the
  // data-parallel baseline's wait for the average): only then are they state worth saving.
  bool grads_pending() const { return grads_pending_; }
  void set_grads_pending(bool pending) { grads_pending_ = pending; }
  // Steps done before the moments were last zeroed (for checkpoints).
  int64_t schedule_offset() const { return schedule_offset_; }
  void set_schedule_offset(int64_t steps) { schedule_offset_ = steps; }
  uint64_t tokens_done() const { return cursor_.tokens; }

 private:
  mlp_lm model_;
  std::shared_ptr<const data_source> data_;
  int batch_;
  int index_;
  int learners_;
  int64_t schedule_offset_ = 0;  // steps done before the moments were last zeroed
  bool grads_pending_ = false;
  float_buffer params_;
  float_buffer grads_;
  adamw_state optimizer_;
  data_cursor cursor_;
  mlp_lm::workspace train_ws_;
  mlp_lm::workspace eval_ws_;
  std::vector<uint8_t> contexts_;  // (B, C)
  std::vector<uint8_t> targets_;   // (B)
};

}  // namespace diloco
