#include "tensor/trainer.hpp"

#include <algorithm>
#include <cassert>

namespace diloco {

inner_trainer::inner_trainer(const model_config& model, std::shared_ptr<const data_source> data,
                             int batch, uint64_t seed, int index, int learners)
    : model_(model),
      data_(std::move(data)),
      batch_(batch),
      index_(index),
      learners_(learners),
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
  return step(config, steps_done());
}

step_stats inner_trainer::step(const adamw_config& config, int64_t schedule_step) {
  const double loss = compute_gradients();
  step_stats stats = apply_gradients(config, schedule_step);
  stats.loss = loss;
  return stats;
}

step_stats inner_trainer::step_from(const inner_trainer& from, const adamw_config& config,
                                    int64_t schedule_step) {
  return step_from(from, from.params_, config, schedule_step);
}

step_stats inner_trainer::step_from(const inner_trainer& from, const float_buffer& params,
                                    const adamw_config& config, int64_t schedule_step) {
  assert(&from != this && from.batch_ == batch_ && from.params_.size() == params_.size());
  assert(params.size() == params_.size() && params.data() != params_.data());
  cursor_ = from.cursor_;
  schedule_offset_ = from.schedule_offset_;
  data_->next_batch(cursor_, contexts_.data(), targets_.data());
  const batch_view batch{contexts_.data(), targets_.data(), batch_};
  grads_.fill(0.0f);
  step_stats stats;
  stats.loss = model_.forward(params, batch, train_ws_);
  model_.backward(params, grads_, batch, train_ws_);
  stats.tokens = static_cast<uint64_t>(batch_);
  stats.lr = config.lr_at(std::max<int64_t>(0, schedule_step));
  stats.grad_norm = clip_grad_norm(grads_.all(), config.clip_norm);
  adamw_update_into(params.all(), from.optimizer_, grads_.all(), params_.all(), optimizer_, config,
                    stats.lr);
  return stats;
}

double inner_trainer::compute_gradients() {
  data_->next_batch(cursor_, contexts_.data(), targets_.data());
  const batch_view batch{contexts_.data(), targets_.data(), batch_};
  grads_.fill(0.0f);
  const double loss = model_.forward(params_, batch, train_ws_);
  model_.backward(params_, grads_, batch, train_ws_);
  return loss;
}

step_stats inner_trainer::apply_gradients(const adamw_config& config) {
  return apply_gradients(config, steps_done());
}

step_stats inner_trainer::apply_gradients(const adamw_config& config, int64_t schedule_step) {
  step_stats stats;
  stats.tokens = static_cast<uint64_t>(batch_);  // the batch of the last compute_gradients
  stats.lr = config.lr_at(std::max<int64_t>(0, schedule_step));
  stats.grad_norm = clip_grad_norm(grads_.all(), config.clip_norm);
  adamw_update(params_.all(), grads_.all(), optimizer_, config, stats.lr);
  return stats;
}

void inner_trainer::restart(int64_t schedule_step, uint64_t data_seed) {
  assert(schedule_step >= 0);
  optimizer_ = adamw_state(params_.size());
  schedule_offset_ = schedule_step;
  const uint64_t tokens = cursor_.tokens;
  cursor_ = data_->open_shard(data_seed, index_, learners_, batch_);
  cursor_.tokens = tokens;
}

double inner_trainer::evaluate() {
  return diloco::evaluate(model_, params_, *data_, eval_ws_);
}

}  // namespace diloco
