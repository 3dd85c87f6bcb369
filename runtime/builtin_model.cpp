#include "runtime/builtin_model.hpp"

#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <utility>

#include "base/check.hpp"
#include "base/job_pool.hpp"
#include "checkpoint/layout_file.hpp"
#include "protocol/persist.hpp"
#include "tensor/trainer.hpp"

namespace diloco {

template <class F>
void persist_fields(F& f, inner_trainer& x) {
  int64_t offset = x.schedule_offset();
  // The gradients only while they wait to be applied (data parallel): between steps they are
  // spent, and a step computed ahead may be writing them.
  bool pending = x.grads_pending();
  f(x.params(), pending);
  if (pending) f(x.grads());
  f(x.optimizer().m, x.optimizer().v, x.optimizer().step, x.cursor(), offset);
  if constexpr (F::loading) {
    x.set_grads_pending(pending);  // not pending: the buffer's values are never read
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

// The built-in MLP as a learner. With threads (learner_spec::ahead) it computes the first half
// of its next step (batch, forward, backward, clipping: most of the step's time) ahead, on a
// pool thread, into a scratch of its own, and the AdamW update that ends a step runs on the
// pool too, in place, as it does without threads: `live_` is the learner's state throughout.
// - compute_ahead: the gradients at live_'s parameters as they will be after the update in
//   flight (the job waits for it). Anything that may change the parameters (params(),
//   gradients, restart, load) first drops it: a job not yet started is called off, a started
//   one waited for.
// - compute_ahead_after: the gradients at a copy of live_'s parameters as a merge due first
//   will leave them (basis_); step() takes them only if the parameters did become the basis,
//   bit for bit. A hint that comes while the first kind runs (a reply arrived during the
//   step) lets that one finish unused; the two share one scratch (the second job waits for
//   the first).
// The jobs write their gradients into live_'s own buffer, spent once the update that reads
// it is done (every job runs or waits for that update first), so computing ahead costs one
// model-sized buffer beside the learner's own four, the basis, and only for models up to
// basis_max_floats: it speeds up the steps that follow a merge (about P in every H), 8% of
// the default run's time, which is not worth a fifth copy of a large model.
// step() takes the half that held and starts the update, or computes the whole step itself.
// Whatever reads or writes the parameters or moments waits for the update first (settle()).
class mlp_compute final : public learner_compute {
 public:
  static constexpr size_t basis_max_floats = size_t{1} << 24;  // 64 MiB of parameters

  mlp_compute(const model_config& model, std::shared_ptr<const data_source> data, int batch,
              const learner_spec& spec)
      : pool_(spec.ahead) {
    live_ = std::make_unique<inner_trainer>(model, data, spec.batch > 0 ? spec.batch : batch,
                                            spec.seed, spec.index, spec.learners, spec.restoring);
    if (pool_) {
      scratch_ = live_->make_scratch();
    }
  }
  ~mlp_compute() override { stop_ahead(); }

  float_buffer& params() override {
    settle();
    drop(plain_);  // it reads live_'s parameters; the one from the basis does not
    return live_->params();
  }
  const float_buffer& params_to_read() override {
    settle();
    return live_->params();
  }
  result<step_stats> step(const adamw_config& inner, int64_t schedule_step) override {
    settle();
    const auto matches = [&](const std::optional<job>& j) {
      return j && !j->unwanted && j->schedule_step == schedule_step && j->inner.same_as(inner);
    };
    std::optional<job>* taken = nullptr;
    if (matches(after_) && same_bits(basis_, live_->params())) {
      taken = &after_;
    } else if (matches(plain_)) {
      taken = &plain_;
    }
    if (taken == nullptr) {
      drop_all();
      return live_->step(inner, schedule_step);
    }
    (*taken)->result.get();  // rethrows what the job threw
    taken->reset();
    drop_all();  // the other reads live_'s parameters, which the update writes
    const step_stats stats = live_->adopt(scratch_, inner, schedule_step);
    steps_after_update_ = live_->steps_done() + 1;
    // The update goes to the pool with the next step ahead (one job), or runs here if
    // anything needs the parameters first.
    update_due_ = due_update{inner, stats.lr};
    return stats;
  }
  void compute_ahead(const adamw_config& inner, int64_t schedule_step) override {
    if (!pool_) return;
    drop_all();
    submit(plain_, inner, schedule_step, &live_->params());
  }
  void compute_ahead_after(const adamw_config& inner, int64_t schedule_step,
                           const std::function<void(float_buffer&)>& change) override {
    if (!pool_) return;
    drop(after_);  // it reads basis_
    if (live_->params().size() > basis_max_floats) {
      // A large model: the copy is not worth it (measured, docs/architecture.md). The step
      // after the merge is computed when it is taken; nothing computed ahead is left.
      drop(plain_);
      basis_ = float_buffer();
      return;
    }
    if (plain_) {
      // No longer the likely step: called off if not started, else left to finish unused; the
      // new job writes the one scratch after it (so that computing ahead costs two
      // model-sized buffers, the scratch's gradients and the basis, not three).
      if (plain_->call_off()) {
        plain_.reset();
      } else {
        plain_->unwanted = true;
      }
    }
    settle();                  // the basis is made from the parameters after the update
    basis_ = live_->params();  // reuses basis_'s memory
    change(basis_);
    submit(after_, inner, schedule_step, &basis_);
  }
  result<double> compute_gradients() override {
    stop_ahead();
    return live_->compute_gradients();
  }
  float_buffer& grads() override {
    stop_ahead();
    return live_->grads();
  }
  result<step_stats> apply_gradients(const adamw_config& inner, int64_t schedule_step) override {
    stop_ahead();
    return live_->apply_gradients(inner, schedule_step);
  }
  // Reads only: a step computed ahead reads the same state meanwhile, which is safe.
  result<double> evaluate() override {
    settle();
    return live_->evaluate();
  }
  status restart(int64_t schedule_step, uint64_t data_seed) override {
    stop_ahead();
    live_->restart(schedule_step, data_seed);
    return ok_status();
  }
  // While the update runs it is counted: the step is done as far as the learner knows.
  int64_t steps_done() const override {
    return update_due_ || update_.valid() ? steps_after_update_ : live_->steps_done();
  }
  uint64_t tokens_done() const override { return live_->tokens_done(); }
  status save(std::vector<uint8_t>& out) override {
    settle();
    out = save_bytes_exact(*live_);  // model-sized: reserved once, never regrown
    return ok_status();
  }
  status load(byte_view state) override {
    stop_ahead();
    return load_bytes(state, "the MLP learner's state", *live_);
  }

 private:
  // The first half of a step computed ahead on the pool into scratch_.
  struct job {
    adamw_config inner;
    int64_t schedule_step = 0;
    bool unwanted = false;  // superseded by a later hint: never taken
    // 0 queued, 1 started, 2 called off before it started (then it touches nothing).
    std::shared_ptr<std::atomic<int>> state = std::make_shared<std::atomic<int>>(0);
    std::shared_future<void> result;
    bool call_off() {
      int queued = 0;
      return state->compare_exchange_strong(queued, 2);
    }
  };

  // The update of the step taken last, if due (it runs even if the rest is called off), then
  // the gradients at `params` from live_'s data cursor. An update already on the pool is ahead
  // of this job in the queue: waiting for it cannot deadlock.
  void submit(std::optional<job>& slot, const adamw_config& inner, int64_t schedule_step,
              const float_buffer* params) {
    DILOCO_CHECK(!slot, "builtin learner: a step ahead submitted over another");
    DILOCO_CHECK(!plain_ || plain_->unwanted, "builtin learner: one wanted step ahead at a time");
    slot.emplace();
    slot->inner = inner;
    slot->schedule_step = schedule_step;
    std::shared_ptr<std::promise<void>> updated;
    const std::optional<due_update> update = std::exchange(update_due_, std::nullopt);
    if (update) {
      DILOCO_CHECK(!update_.valid(), "builtin learner: step() settled the update before");
      updated = std::make_shared<std::promise<void>>();
      update_ = updated->get_future().share();
    }
    // Without an update of its own, the job waits for the one already on the pool, if any.
    std::shared_future<void> earlier = update ? std::shared_future<void>{} : update_;
    // An unwanted job still writing the scratch goes first (it has started: no deadlock).
    std::shared_future<void> scratch_busy =
        plain_ && plain_->unwanted ? plain_->result : std::shared_future<void>{};
    slot->result = pool_
                       ->submit([state = slot->state, update, updated, earlier, scratch_busy,
                                 t = live_.get(), params, cursor = live_->cursor(),
                                 clip = inner.clip_norm, s = &scratch_, g = &live_->grads()] {
                         if (update) {
                           t->update(update->inner, update->lr);
                           updated->set_value();
                         }
                         int queued = 0;
                         if (!state->compare_exchange_strong(queued, 1)) return;
                         if (earlier.valid()) earlier.wait();
                         if (scratch_busy.valid()) scratch_busy.wait();
                         t->gradients_into(*params, cursor, clip, *s, *g);
                       })
                       .share();
  }
  // Forgets a step computed ahead: called off if it has not started, else waited for (it reads
  // the parameters, and writes its scratch).
  static void drop(std::optional<job>& slot) {
    if (!slot) return;
    if (!slot->call_off() && slot->result.valid()) slot->result.wait();
    slot.reset();
  }
  void drop_all() {
    drop(plain_);
    drop(after_);
  }
  // Nothing computed ahead any more, nothing pending: live_ is the learner's whole state.
  void stop_ahead() {
    drop_all();  // first: a job called off before it starts still runs the update it carries
    settle();
  }
  // The update of the last step taken ahead done: here if it is still due, else waited for.
  void settle() {
    if (update_due_) {
      DILOCO_CHECK(!update_.valid(), "builtin learner: an update both due and on the pool");
      live_->update(update_due_->inner, update_due_->lr);
      update_due_.reset();
    }
    if (!update_.valid()) return;
    update_.get();
    update_ = {};
  }

  static bool same_bits(const float_buffer& a, const float_buffer& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }

  std::unique_ptr<inner_trainer> live_;
  inner_trainer::ahead_scratch scratch_;
  std::shared_ptr<job_pool> pool_;
  // The AdamW update of the last step taken ahead: due (not yet on the pool), or on the pool.
  struct due_update {
    adamw_config inner;
    double lr = 0.0;
  };
  std::optional<due_update> update_due_;
  std::shared_future<void> update_;
  int64_t steps_after_update_ = 0;
  std::optional<job> plain_;  // from live_'s parameters after the update
  std::optional<job> after_;  // from basis_
  float_buffer basis_;
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
  // The learners may bring their own data: the run's data is not known to be their floor.
  bool trains_on_run_data() const override { return false; }

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
