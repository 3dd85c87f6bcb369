#include "runtime/builtin_model.hpp"

#include <future>
#include <mutex>
#include <optional>

#include "base/check.hpp"
#include "base/job_pool.hpp"
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

bool same_inner(const adamw_config& a, const adamw_config& b) {
  return a.lr == b.lr && a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps &&
         a.weight_decay == b.weight_decay && a.clip_norm == b.clip_norm &&
         a.warmup_steps == b.warmup_steps && a.total_steps == b.total_steps &&
         a.min_lr_ratio == b.min_lr_ratio;
}

// The built-in MLP as a learner. With threads (learner_spec::ahead) it computes its next step
// ahead: `live_` is the learner's state, `spare_` receives the step computed from it on a
// pool thread (inner_trainer::step_from reads live_ only), and step() swaps them when the
// guess held. Anything that may change live_ (params(), gradients, restart, load) first waits
// for the step ahead and drops it.
class mlp_compute final : public learner_compute {
 public:
  mlp_compute(const model_config& model, std::shared_ptr<const data_source> data, int batch,
              const learner_spec& spec)
      : live_(std::make_unique<inner_trainer>(model, data, spec.batch > 0 ? spec.batch : batch,
                                              spec.seed, spec.index, spec.learners)),
        pool_(spec.ahead) {
    if (pool_) {
      spare_ = std::make_unique<inner_trainer>(model, data, spec.batch > 0 ? spec.batch : batch,
                                               spec.seed, spec.index, spec.learners);
    }
  }
  ~mlp_compute() override { drop_ahead(); }

  float_buffer& params() override {
    drop_ahead();
    return live_->params();
  }
  const float_buffer& params_to_read() override { return live_->params(); }
  result<step_stats> step(const adamw_config& inner, int64_t schedule_step) override {
    if (ahead_ && ahead_->schedule_step == schedule_step && same_inner(ahead_->inner, inner)) {
      const step_stats stats = ahead_->result.get();  // rethrows what the job threw
      ahead_.reset();
      std::swap(live_, spare_);
      return stats;
    }
    drop_ahead();
    return live_->step(inner, schedule_step);
  }
  void compute_ahead(const adamw_config& inner, int64_t schedule_step) override {
    if (!pool_) return;
    drop_ahead();
    inner_trainer* from = live_.get();
    inner_trainer* to = spare_.get();
    ahead_.emplace();
    ahead_->inner = inner;
    ahead_->schedule_step = schedule_step;
    ahead_->result = pool_->submit(
        [from, to, inner, schedule_step] { return to->step_from(*from, inner, schedule_step); });
  }
  result<double> compute_gradients() override {
    drop_ahead();
    return live_->compute_gradients();
  }
  float_buffer& grads() override {
    drop_ahead();
    return live_->grads();
  }
  result<step_stats> apply_gradients(const adamw_config& inner, int64_t schedule_step) override {
    drop_ahead();
    return live_->apply_gradients(inner, schedule_step);
  }
  // Reads only: a step computed ahead reads the same state meanwhile, which is safe.
  result<double> evaluate() override { return live_->evaluate(); }
  status restart(int64_t schedule_step, uint64_t data_seed) override {
    drop_ahead();
    live_->restart(schedule_step, data_seed);
    return ok_status();
  }
  int64_t steps_done() const override { return live_->steps_done(); }
  uint64_t tokens_done() const override { return live_->tokens_done(); }
  status save(std::vector<uint8_t>& out) override {
    out = save_bytes(*live_);
    return ok_status();
  }
  status load(byte_view state) override {
    drop_ahead();
    return load_bytes(state, "the MLP learner's state", *live_);
  }

 private:
  // Waits for the step computed ahead, if any, and forgets it (live_ is unchanged by it).
  void drop_ahead() {
    if (!ahead_) return;
    if (ahead_->result.valid()) ahead_->result.wait();
    ahead_.reset();
  }

  struct step_ahead {
    adamw_config inner;
    int64_t schedule_step = 0;
    std::future<step_stats> result;
  };
  std::unique_ptr<inner_trainer> live_, spare_;
  std::shared_ptr<job_pool> pool_;
  std::optional<step_ahead> ahead_;
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
