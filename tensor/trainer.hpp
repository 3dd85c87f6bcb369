// One learner's computation without any runtime around it: a model replica, its AdamW state
// and its data cursor. `diloco train` runs it bare; the learner actor wraps it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/data.hpp"
#include "tensor/model.hpp"
#include "tensor/optim.hpp"

namespace diloco {

struct step_stats {
  double loss = 0.0;       // mean cross-entropy of the batch, nats
  double grad_norm = 0.0;  // before clipping
  double lr = 0.0;
};

class inner_trainer {
 public:
  // Learner `index` of `learners`; parameters initialized from `seed` (the same for every
  // learner, as all replicas start from one global model), data shard from (seed, index).
  inner_trainer(const model_config& model, std::shared_ptr<const data_source> data, int batch,
                uint64_t seed, int index, int learners);

  step_stats step(const adamw_config& config);
  double evaluate();

  const mlp_lm& model() const { return model_; }
  float_buffer& params() { return params_; }
  const float_buffer& params() const { return params_; }
  adamw_state& optimizer() { return optimizer_; }
  data_cursor& cursor() { return cursor_; }
  int batch() const { return batch_; }
  int64_t steps_done() const { return optimizer_.step; }
  uint64_t tokens_done() const { return cursor_.tokens; }

 private:
  mlp_lm model_;
  std::shared_ptr<const data_source> data_;
  int batch_;
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
