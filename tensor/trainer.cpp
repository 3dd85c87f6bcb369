#include "tensor/trainer.hpp"

#include <cassert>

namespace diloco {

inner_trainer::inner_trainer(const model_config& model, std::shared_ptr<const data_source> data,
                             int batch, uint64_t seed, int index, int learners)
    : model_(model),
      data_(std::move(data)),
      batch_(batch),
      params_(model_.layout().buffer_floats()),
      grads_(model_.layout().buffer_floats()),
      optimizer_(model_.layout().buffer_floats()),
      cursor_(data_->open_shard(seed, index, learners, batch)),
      train_ws_(model_.make_workspace(batch)),
      eval_ws_(model_.make_workspace(256)),
      contexts_(static_cast<size_t>(batch) * model.context),
      targets_(static_cast<size_t>(batch)) {
  assert(batch > 0);
  assert(data_->context() == model.context);
  model_.init(params_, seed);
}

step_stats inner_trainer::step(const adamw_config& config) {
  data_->next_batch(cursor_, contexts_.data(), targets_.data());
  const batch_view batch{contexts_.data(), targets_.data(), batch_};

  step_stats stats;
  stats.lr = config.lr_at(optimizer_.step);
  grads_.fill(0.0f);
  stats.loss = model_.forward(params_, batch, train_ws_);
  model_.backward(params_, grads_, batch, train_ws_);
  stats.grad_norm = clip_grad_norm(grads_.all(), config.clip_norm);
  adamw_update(params_.all(), grads_.all(), optimizer_, config);
  return stats;
}

double inner_trainer::evaluate() {
  return diloco::evaluate(model_, params_, *data_, eval_ws_);
}

}  // namespace diloco
