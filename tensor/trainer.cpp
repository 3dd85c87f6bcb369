#include "tensor/trainer.hpp"

#include <algorithm>

#include "base/check.hpp"

namespace diloco {

inner_trainer::inner_trainer(const model_config& model, std::shared_ptr<const data_source> data,
                             int batch, uint64_t seed, int index, int learners, bool restoring)
    : model_(model),
      data_(std::move(data)),
      batch_(batch),
      index_(index),
      learners_(learners),
      params_(restoring ? 0 : model_.layout().buffer_floats()),
      grads_(restoring ? float_buffer::uninitialized(model_.layout().buffer_floats())
                       : float_buffer(model_.layout().buffer_floats())),
      optimizer_(restoring ? 0 : model_.layout().buffer_floats()),
      cursor_(data_->open_shard(seed, index, learners, batch)),
      train_ws_(model_.make_workspace(batch)),
      eval_ws_(model_.make_workspace(256)),
      contexts_(static_cast<size_t>(batch) * model.context),
      targets_(static_cast<size_t>(batch)) {
  DILOCO_CHECK(batch > 0, "trainer: a batch of at least one sequence");
  DILOCO_CHECK(data_->context() == model.context,
               "trainer: the data and the model read the same context");
  if (!restoring) model_.init(params_, seed);
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

inner_trainer::ahead_scratch inner_trainer::make_scratch() const {
  ahead_scratch s;
  s.ws = model_.make_workspace(batch_);
  s.contexts.resize(contexts_.size());
  s.targets.resize(targets_.size());
  s.cursor = cursor_;
  return s;
}

void inner_trainer::gradients_into(const float_buffer& params, const data_cursor& cursor,
                                   double clip_norm, ahead_scratch& s, float_buffer& grads) const {
  DILOCO_CHECK(params.size() == params_.size() && grads.size() == params_.size(),
               "trainer: a step ahead on buffers as large as the model");
  DILOCO_CHECK(s.targets.size() == static_cast<size_t>(batch_),
               "trainer: a scratch made for this batch");
  s.cursor = cursor;
  data_->next_batch(s.cursor, s.contexts.data(), s.targets.data());
  const batch_view batch{s.contexts.data(), s.targets.data(), batch_};
  grads.fill(0.0f);
  s.loss = model_.forward(params, batch, s.ws);
  model_.backward(params, grads, batch, s.ws);
  s.grad_norm = clip_grad_norm(grads.all(), clip_norm);
}

step_stats inner_trainer::adopt(ahead_scratch& s, const adamw_config& config,
                                int64_t schedule_step) {
  cursor_ = s.cursor;
  step_stats stats;
  stats.loss = s.loss;
  stats.grad_norm = s.grad_norm;
  stats.tokens = static_cast<uint64_t>(batch_);
  stats.lr = config.lr_at(std::max<int64_t>(0, schedule_step));
  return stats;
}

void inner_trainer::update(const adamw_config& config, double lr) {
  adamw_update(params_.all(), grads_.all(), optimizer_, config, lr);
}

double inner_trainer::compute_gradients() {
  data_->next_batch(cursor_, contexts_.data(), targets_.data());
  const batch_view batch{contexts_.data(), targets_.data(), batch_};
  grads_.fill(0.0f);
  const double loss = model_.forward(params_, batch, train_ws_);
  model_.backward(params_, grads_, batch, train_ws_);
  grads_pending_ = true;
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
  grads_pending_ = false;
  return stats;
}

void inner_trainer::restart(int64_t schedule_step, uint64_t data_seed) {
  DILOCO_CHECK(schedule_step >= 0, "trainer: a restart at a schedule step");
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
