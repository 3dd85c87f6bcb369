#include "runtime/builtin_model.hpp"

#include <mutex>

#include "base/check.hpp"
#include "checkpoint/layout_file.hpp"
#include "protocol/persist.hpp"
#include "tensor/trainer.hpp"

namespace diloco {

template <class F>
void persist_fields(F& f, inner_trainer& x) {
  int64_t offset = x.schedule_offset();
  f(x.params(), x.grads(), x.optimizer().m, x.optimizer().v, x.optimizer().step, x.cursor(),
    offset);
  if constexpr (F::loading) {
    const size_t n = x.model().layout().buffer_floats();
    if (x.params().size() != n || x.grads().size() != n || x.optimizer().m.size() != n ||
        x.optimizer().v.size() != n) {
      throw persist_error{"the model's parameter count (" + std::to_string(n) +
                          ") does not match the saved one"};
    }
    x.set_schedule_offset(offset);
  }
}

namespace {

class mlp_compute final : public learner_compute {
 public:
  mlp_compute(const model_config& model, std::shared_ptr<const data_source> data, int batch,
              const learner_spec& spec)
      : trainer_(model, std::move(data), spec.batch > 0 ? spec.batch : batch, spec.seed, spec.index,
                 spec.learners) {}

  float_buffer& params() override { return trainer_.params(); }
  result<step_stats> step(const adamw_config& inner, int64_t schedule_step) override {
    return trainer_.step(inner, schedule_step);
  }
  result<double> compute_gradients() override { return trainer_.compute_gradients(); }
  float_buffer& grads() override { return trainer_.grads(); }
  result<step_stats> apply_gradients(const adamw_config& inner, int64_t schedule_step) override {
    return trainer_.apply_gradients(inner, schedule_step);
  }
  result<double> evaluate() override { return trainer_.evaluate(); }
  status restart(int64_t schedule_step, uint64_t data_seed) override {
    trainer_.restart(schedule_step, data_seed);
    return ok_status();
  }
  int64_t steps_done() const override { return trainer_.steps_done(); }
  uint64_t tokens_done() const override { return trainer_.tokens_done(); }
  status save(std::vector<uint8_t>& out) override {
    out = save_bytes(trainer_);
    return ok_status();
  }
  status load(byte_view state) override {
    return load_bytes(state, "the MLP learner's state", trainer_);
  }

 private:
  inner_trainer trainer_;
};

class mlp_family final : public model_family {
 public:
  mlp_family(const model_config& model, int batch, std::shared_ptr<const data_source> data)
      : config_(model), model_(model), batch_(batch), data_(std::move(data)) {}

  const param_layout& layout() const override { return model_.layout(); }
  std::string describe() const override {
    return "built-in byte-level MLP, " + std::to_string(model_.layout().param_count()) +
           " parameters";
  }
  void init(float_buffer& params, uint64_t seed) const override { model_.init(params, seed); }
  result<std::unique_ptr<learner_compute>> make(const learner_spec& spec) const override {
    return std::unique_ptr<learner_compute>(
        std::make_unique<mlp_compute>(config_, data_, batch_, spec));
  }
  result<double> evaluate(const float_buffer& params) const override {
    DILOCO_CHECK(params.size() == model_.layout().buffer_floats(),
                 "mlp_family::evaluate: a buffer of another layout");
    std::lock_guard<std::mutex> lock(mu_);
    if (ws_.batch == 0) ws_ = model_.make_workspace(256);
    return diloco::evaluate(model_, params, *data_, ws_);
  }
  double train_flops_per_token() const override { return model_.train_flops_per_token(); }

 private:
  model_config config_;
  mlp_lm model_;
  int batch_;
  std::shared_ptr<const data_source> data_;
  mutable std::mutex mu_;
  mutable mlp_lm::workspace ws_;
};

class file_family final : public model_family {
 public:
  file_family(std::string path, layout_model model)
      : path_(std::move(path)), model_(std::move(model)) {}
  const param_layout& layout() const override { return model_.layout; }
  std::string describe() const override {
    return model_.description + " (layout and initial model from " + path_ + ")";
  }
  void init(float_buffer& params, uint64_t) const override {
    DILOCO_CHECK(params.size() == model_.initial.size(), "file_family::init: another layout");
    params = model_.initial;
  }
  status runnable() const override {
    return status(errc::invalid_argument,
                  "the model of " + path_ + " (" + model_.description +
                      ") is a PyTorch learner: run its learners with the Python package, "
                      "python3 -m diloco ... --learner MODULE:FUNCTION");
  }
  result<std::unique_ptr<learner_compute>> make(const learner_spec&) const override {
    return runnable();
  }
  result<double> evaluate(const float_buffer&) const override {
    return status(errc::invalid_argument,
                  "the model of " + path_ + " is evaluated by its PyTorch learners, not here");
  }

 private:
  std::string path_;
  layout_model model_;
};

}  // namespace

result<std::shared_ptr<const model_family>> layout_file_family(const std::string& path) {
  auto model = load_layout_model(path);
  if (!model) return model.error().with_context("model.file");
  return std::shared_ptr<const model_family>(
      std::make_shared<file_family>(path, std::move(model).value()));
}

std::shared_ptr<const model_family> builtin_mlp_family(const model_config& model, int batch,
                                                       std::shared_ptr<const data_source> data) {
  return std::make_shared<mlp_family>(model, batch, std::move(data));
}

}  // namespace diloco
