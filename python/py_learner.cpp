#include "python/py_learner.hpp"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/check.hpp"
#include "base/job_pool.hpp"
#include "checkpoint/layout_file.hpp"
#include "config/printing.hpp"
#include "protocol/persist.hpp"
#include "runtime/builtin_model.hpp"
#include "tensor/rng.hpp"

namespace py = pybind11;

namespace diloco {
namespace python {

copy_counts& copies() {
  static copy_counts c;
  return c;
}

namespace {
std::atomic<bool> never_call_off{false};
}  // namespace

void set_never_call_off(bool on) {
  never_call_off.store(on);
}

namespace {

// Python keeps a thread's thread-local data (threading.local: torch's caches among them) in
// the thread's Python thread state. pybind11 makes one for a thread of ours at each acquire and
// deletes it at the release, so every call from an actor's or a pool's thread would start with
// empty caches: DTensor's sharding cache is such, and an FSDP island's steps recomputed every
// operation's placement (its rank 0 spent twice the CPU of a bare FSDP rank). The first call on a
// thread makes a thread state that stays with it (the GIL released again at once); later
// acquires find it and leave it be.
void keep_thread_state() {
  thread_local bool kept = false;
  if (kept) return;
  kept = true;
  if (PyGILState_GetThisThreadState() != nullptr) return;  // a Python thread: it has one
  PyGILState_Ensure();
  PyEval_SaveThread();
}

// torch also keeps DTensor's dispatch cache (Python objects) in a C++ thread-local table, which
// it frees when the thread exits without taking the GIL: with the thread state kept, that
// aborted the process at the end of a run. A thread that has used DTensors gets this guard
// (made after the table, so destroyed before it), which empties the table with the GIL first.
struct dtensor_cache_guard {
  ~dtensor_cache_guard() {
#if PY_VERSION_HEX >= 0x030D0000
    if (!Py_IsInitialized() || Py_IsFinalizing()) return;
#else
    if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
#endif
    const PyGILState_STATE s = PyGILState_Ensure();
    // Borrowed; torch._C is loaded (the guard is made only on a thread that used DTensors).
    PyObject* c = PyDict_GetItemString(PyImport_GetModuleDict(), "torch._C");
    if (c != nullptr) {
      PyObject* r = PyObject_CallMethod(c, "_clear_DTensor_sharding_propagator_cache", nullptr);
      Py_XDECREF(r);
      PyErr_Clear();
    }
    PyGILState_Release(s);
  }
};

// Holding the GIL: whether this thread's DTensor dispatch cache has entries (then it gets its
// guard, once).
void guard_dtensor_cache() {
  thread_local bool guarded = false;
  if (guarded) return;
  PyObject* modules = PyImport_GetModuleDict();  // borrowed
  if (PyDict_GetItemString(modules, "torch.distributed.tensor") == nullptr) return;
  PyObject* c = PyDict_GetItemString(modules, "torch._C");
  if (c == nullptr) return;
  PyObject* stats = PyObject_CallMethod(c, "_get_DTensor_sharding_propagator_cache_stats", nullptr);
  if (stats == nullptr) {
    PyErr_Clear();
    guarded = true;  // a torch without it: nothing to guard
    return;
  }
  long used = 0;
  if (PyTuple_Check(stats) && PyTuple_Size(stats) == 2)
    used = PyLong_AsLong(PyTuple_GetItem(stats, 0)) + PyLong_AsLong(PyTuple_GetItem(stats, 1));
  Py_DECREF(stats);
  PyErr_Clear();
  if (used <= 0) return;
  thread_local dtensor_cache_guard guard;
  (void)guard;
  guarded = true;
}

// The GIL, on a thread whose Python thread state stays (keep_thread_state, first).
struct kept_thread_state {
  kept_thread_state() { keep_thread_state(); }
};
struct python_gil : kept_thread_state {
  python_gil() = default;
  python_gil(const python_gil&) = delete;
  python_gil& operator=(const python_gil&) = delete;
  ~python_gil() { guard_dtensor_cache(); }
  py::gil_scoped_acquire acquired;
};

// The user's code raised: the exception's type and message, and where in the user's code it
// was raised (diloco._learner.describe_error), as a status.
status user_error(py::error_already_set& e) {
  std::string what;
  try {
    what = py::module_::import("diloco._learner")
               .attr("describe_error")(e.type(), e.value(), e.trace())
               .cast<std::string>();
  } catch (py::error_already_set& inner) {
    what = e.what();
  }
  return status(errc::user_code, what);
}

// f(), with Python's lock let go if this thread holds it: for a wait on a job that needs it.
template <class F>
auto without_gil(F&& f) {
  if (PyGILState_Check() == 0) return f();
  py::gil_scoped_release unlocked;
  return f();
}

// A float_buffer shared with numpy: the capsule keeps the memory alive as long as any tensor
// view of it does (user code may keep a module after its learner ended).
py::array_t<float> share(const std::shared_ptr<float_buffer>& buf) {
  auto* keep = new std::shared_ptr<float_buffer>(buf);
  py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<float_buffer>*>(p); });
  return py::array_t<float>({static_cast<py::ssize_t>(buf->size())}, {sizeof(float)}, buf->data(),
                            owner);
}

tensor_role role_of(const std::string& kind) {
  if (kind == "embedding") return tensor_role::embedding;
  if (kind == "bias") return tensor_role::bias;
  return tensor_role::weight;
}

struct layout_entry {
  std::string name;
  std::vector<int64_t> shape;
  std::string kind;
  int layer = 0;
};

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

class py_family;

// Learner steps in progress, watched against their timeout (run_config::step_timeout_s) by one
// thread of the process. A step of a user's code that never returns cannot be taken back (the
// thread holds its learner's state, and Python threads cannot be stopped), so one that runs
// past its timeout ends the process with exit 3 after saying which learner and how long: the
// simulation, or the deployed node, would otherwise wait for ever without a word. A deployed
// node's peers see it go, as after a crash, and go on.
class step_watchdog {
 public:
  static step_watchdog& get() {
    static step_watchdog* w = new step_watchdog();  // never destroyed: its thread outlives main
    return *w;
  }
  uint64_t begin(const std::string& who, double timeout_s) {
    if (!(timeout_s > 0)) return 0;
    std::lock_guard<std::mutex> g(mu_);
    const uint64_t id = ++next_;
    const auto limit =
        std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
    running_[id] = entry{who, timeout_s, clock::now() + limit};
    if (!thread_.joinable()) thread_ = std::thread([this] { watch(); });
    return id;
  }
  void end(uint64_t id) {
    if (id == 0) return;
    std::lock_guard<std::mutex> g(mu_);
    running_.erase(id);
  }

 private:
  using clock = std::chrono::steady_clock;
  struct entry {
    std::string who;
    double timeout_s;
    clock::time_point due;
  };
  void watch() {
    std::unique_lock<std::mutex> g(mu_);
    for (;;) {
      cv_.wait_for(g, std::chrono::milliseconds(250));
      const auto now = clock::now();
      for (const auto& [id, e] : running_) {
        if (now < e.due) continue;
        std::fprintf(stderr,
                     "diloco: %s: its step has not returned after %.0f s (step_timeout_s): the "
                     "process ends, exit 3\n",
                     e.who.c_str(), e.timeout_s);
        std::fflush(stderr);
        std::fflush(stdout);
        std::_Exit(3);
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, entry> running_;
  uint64_t next_ = 0;
  std::thread thread_;
};

// Watches the step of its scope.
struct watched_step {
  uint64_t id;
  watched_step(const std::string& who, double timeout_s)
      : id(step_watchdog::get().begin(who, timeout_s)) {}
  ~watched_step() { step_watchdog::get().end(id); }
  watched_step(const watched_step&) = delete;
  watched_step& operator=(const watched_step&) = delete;
};

// A user's learner. With threads (learner_spec::ahead) a learner on the runtime's data computes
// the gradients of its next step ahead on a pool thread (python/diloco/_learner.py,
// Runner.gradients_ahead), on the batch its data cursor will give next:
// - compute_ahead: at the parameters themselves, after the update in flight (the job runs it
//   first). Anything that may write the parameters (params(), a load or restart) drops it.
// - compute_ahead_after: at a copy of the parameters as a merge due first will leave them
//   (basis_), in shadow buffers; step() takes it only if the parameters did become the basis,
//   bit for bit.
// step() takes the gradients if they are the step asked for (schedule step, inner settings),
// nothing read the data meanwhile and they drew nothing from torch's generator, and leaves the
// step's optimizer update due: it goes to the pool with the next step ahead, or runs here when
// anything needs the parameters first (settle()). Otherwise the step is computed in its turn.
// The optimizer is only ever stepped for a step taken, so a step ahead not taken has nothing of
// it to put back. Either way the same bits.
class py_compute final : public learner_compute {
 public:
  py_compute(const py_family& family, const learner_spec& spec);
  ~py_compute() override {
    remember(stop_ahead());
    python_gil gil;
    runner_ = py::object();
    data_obj_ = py::object();
  }

  status init(py::object runner);

  float_buffer& params() override {
    remember(settle());
    if (job_ && !job_->shadow) drop_ahead();  // it reads the parameters, which may change now
    if (mirror_) remember(mirror_to_host(nullptr, true));
    return *params_;
  }
  const float_buffer& params_to_read() override {
    remember(settle());
    if (mirror_) remember(mirror_to_host(nullptr, false));
    return *params_;
  }
  const float_buffer& spans_to_read(const std::vector<param_span>& spans) override {
    remember(settle());
    if (mirror_) remember(mirror_to_host(&spans, false));
    return *params_;
  }
  float_buffer& spans_to_write(const std::vector<param_span>& spans) override {
    return writable(spans, true);
  }
  float_buffer& spans_to_overwrite(const std::vector<param_span>& spans) override {
    return writable(spans, false);
  }
  float_buffer& grads() override {
    remember(stop_ahead());
    return *grads_;
  }
  result<step_stats> step(const adamw_config& inner, int64_t schedule_step) override;
  void compute_ahead(const adamw_config& inner, int64_t schedule_step) override;
  void compute_ahead_after(const adamw_config& inner, int64_t schedule_step,
                           const std::function<void(float_buffer&)>& change) override;
  result<double> compute_gradients() override;
  result<step_stats> apply_gradients(const adamw_config& inner, int64_t schedule_step) override;
  result<double> evaluate() override;
  status restart(int64_t schedule_step, uint64_t data_seed) override;
  int64_t steps_done() const override { return offset_ + steps_; }
  uint64_t tokens_done() const override { return tokens_; }
  status save(std::vector<uint8_t>& out) override;
  status load(byte_view state) override;

  py::object& runner() { return runner_; }

 private:
  // A step's gradients computed ahead: what they were asked for, where (the parameters, or
  // basis_ in the shadow buffers), the data cursor around the batch, and (loss, gradient norm),
  // none when they cannot be taken.
  struct ahead_job {
    adamw_config inner;
    int64_t schedule_step = 0;
    bool shadow = false;
    data_cursor cursor_before, cursor_after;
    // 0 queued, 1 started, 2 called off before it started (then it computes nothing).
    std::shared_ptr<std::atomic<int>> state = std::make_shared<std::atomic<int>>(0);
    std::future<std::optional<std::pair<double, double>>> result;
    bool waited = false;      // result's outcome is in `outcome`
    bool called_off = false;  // before it began: it computed nothing, and is not waited for
    std::optional<std::pair<double, double>> outcome;
  };
  // The optimizer update of the step taken last from ahead (Runner.update): its settings, and
  // once on the pool, who runs it (the job carrying it, or settle() if that job has not begun)
  // and its outcome.
  struct due_update {
    double lr = 0.0, clip = 0.0, norm = 0.0;
  };
  struct pool_update {
    due_update what;
    std::atomic<bool> claimed{false};
    std::promise<status> done;
    std::shared_future<status> outcome = done.get_future().share();
  };

  result<uint64_t> step_tokens(py::handle returned, uint64_t cursor_before) const;
  void submit_ahead(const adamw_config& inner, int64_t schedule_step, bool shadow);
  std::optional<std::pair<double, double>> wait_ahead();
  // Forgets the step ahead: called off if it has not begun, else waited for and put back.
  void drop_ahead();
  // The due update done: here if it is still due, else waited for. Its error, if it raised.
  status settle();
  // Nothing computed ahead and nothing due: the learner's whole state is the runner's.
  status stop_ahead() {
    drop_ahead();  // first: a job called off before it begins leaves its update to settle()
    return settle();
  }
  // An update's error where the caller returns no status: reported by the next call that does.
  void remember(status s) {
    if (!s.ok() && failed_.ok()) failed_ = std::move(s);
  }
  status take_failure() { return std::exchange(failed_, ok_status()); }
  // Before a call that reads or writes the learner's whole state: an update's error held since,
  // else nothing ahead and nothing due.
  status stop_for_call() {
    if (auto f = take_failure(); !f.ok()) return f;
    return stop_ahead();
  }
  // The update due, run here with the learner's generator (Runner.update_now).
  status update_here(const due_update& u);
  // After a call into the runner (the GIL held): whether its next step may go ahead.
  void refresh_ahead_ok();
  // The device mirror (a module whose parameters live on a device, Runner.mirror): these spans
  // of the buffer (all: null) copied to the host where the device is ahead of it, and, with
  // `write`, taken back to the device before the next step.
  // The parameters, these spans to be written (read first, or only overwritten: `read`).
  float_buffer& writable(const std::vector<param_span>& spans, bool read) {
    remember(settle());
    if (job_ && !job_->shadow) drop_ahead();
    if (mirror_) remember(mirror_to_host(&spans, true, read));
    return *params_;
  }
  // The host copy of these spans (all: nullptr) made current for the runtime; with `write`
  // they go back to the device before the next step; without `read` the runtime only writes
  // them, so nothing is copied to the host for them.
  status mirror_to_host(const std::vector<param_span>* spans, bool write, bool read = true);

  const py_family& family_;
  learner_spec spec_;
  std::string who_;
  std::shared_ptr<float_buffer> params_, grads_;
  std::shared_ptr<data_handle> data_;
  py::object data_obj_;
  py::object runner_;
  int64_t offset_ = 0;  // schedule steps done before the last restart
  int64_t steps_ = 0;   // optimizer steps since then
  uint64_t tokens_ = 0;
  uint64_t cursor_at_gradients_ = 0;
  uint64_t pending_tokens_ = 0;  // data parallel: the tokens of the computed gradients
  std::shared_ptr<job_pool> pool_;
  bool ahead_ok_ = false;
  bool pool_update_ = false;  // the runner's optimizer may step on the pool (Runner.pool_update)
  bool mirror_ = false;       // params_ mirrors a device's parameters (Runner.mirror)
  std::shared_ptr<float_buffer> shadow_params_, shadow_grads_;
  float_buffer basis_;
  std::optional<ahead_job> job_;
  std::optional<due_update> update_due_;  // not yet on the pool
  std::shared_ptr<pool_update> update_;   // on the pool
  status failed_ = ok_status();
};

class py_family final : public model_family {
 public:
  py_family(py::object factory, const run_config& config, std::shared_ptr<const data_source> data)
      : factory_(std::move(factory)), config_(config), data_(std::move(data)) {
    config_text_ = config_as_yaml(config_);
  }
  ~py_family() override {
    python_gil gil;
    evaluator_.reset();
    factory_ = py::object();
  }

  // Builds the evaluator (learner 0's module), which defines the layout and the initial model.
  status build() {
    learner_spec spec{0, config_.learner_capacity(), config_.seed, 0, 0, nullptr};
    python_gil gil;
    std::vector<layout_entry> entries;
    std::vector<py::array_t<float>> values;
    py::object runner;
    try {
      runner = new_runner(spec);
      for (auto item : runner.attr("layout")()) {
        auto t = item.cast<py::tuple>();
        layout_entry e;
        e.name = t[0].cast<std::string>();
        e.shape = t[1].cast<std::vector<int64_t>>();
        e.kind = t[2].cast<std::string>();
        e.layer = t[3].cast<int>();
        entries.push_back(std::move(e));
      }
      for (auto v : runner.attr("values")()) values.push_back(v.cast<py::array_t<float>>());
      run_data_ = !runner.attr("learner").attr("loss").is_none();
    } catch (py::error_already_set& e) {
      return user_error(e).with_context("learner 0");
    }
    for (const auto& e : entries) {
      size_t rows = 1, cols = 1;
      if (!e.shape.empty()) rows = static_cast<size_t>(e.shape[0]);
      for (size_t i = 1; i < e.shape.size(); ++i) cols *= static_cast<size_t>(e.shape[i]);
      if (e.shape.size() == 1) {
        cols = rows;
        rows = 1;
      }
      if (rows * cols == 0)
        return status(errc::user_code, "learner 0: parameter " + e.name + " is empty");
      layout_.add(e.name, rows, cols, role_of(e.kind), e.layer);
      shapes_.push_back(e.shape);
    }
    init_ = float_buffer(layout_.buffer_floats());
    for (size_t i = 0; i < values.size(); ++i) {
      const tensor_info& t = layout_.at(i);
      std::memcpy(init_.data() + t.offset, values[i].data(), t.size() * sizeof(float));
    }
    if (!config_.model.file.empty()) {
      // A deployed run: every node takes the initial model from the file the nodes without the
      // learner read, and the learner must be the model it describes.
      auto file = load_layout_model(config_.model.file);
      if (!file) return file.error();
      if (auto d = layout_difference(layout_, file->layout); !d.empty()) {
        return status(errc::user_code,
                      "learner 0's model is not the one of " + config_.model.file + ": " + d);
      }
      init_ = file->initial;
    }
    for (size_t i = 0; i < init_.size(); ++i) {
      if (!std::isfinite(init_[i]))
        return status(errc::user_code,
                      "learner 0: the module's initial parameters are not finite (" +
                          layout_.at(0).name + "...)");
    }
    auto ev = std::make_unique<py_compute>(*this, spec);
    if (auto s = ev->init(std::move(runner)); !s.ok()) return s.with_context("learner 0");
    evaluator_ = std::move(ev);
    return ok_status();
  }

  // A Runner for a learner: its context, its data, its torch seed.
  py::object new_runner(const learner_spec& spec, py::object data_obj = py::none()) const {
    py::module_ ctx_mod = py::module_::import("diloco._context");
    py::module_ learner_mod = py::module_::import("diloco._learner");
    const adamw_config& in = config_.inner;
    py::dict inner;
    inner["lr"] = in.lr;
    inner["beta1"] = in.beta1;
    inner["beta2"] = in.beta2;
    inner["eps"] = in.eps;
    inner["weight_decay"] = in.weight_decay;
    inner["clip_norm"] = in.clip_norm;
    inner["warmup_steps"] = in.warmup_steps;
    inner["total_steps"] = in.total_steps;
    inner["min_lr_ratio"] = in.min_lr_ratio;
    py::dict model;
    model["vocab"] = config_.model.vocab;
    model["context"] = config_.model.context;
    model["embed_dim"] = config_.model.embed_dim;
    model["hidden"] = config_.model.hidden;
    model["hidden_layers"] = config_.model.hidden_layers;
    if (data_obj.is_none())
      data_obj = ctx_mod.attr("Data")(py::cast(open_data(data_, config_, spec.index)));
    py::object ctx = ctx_mod.attr("LearnerContext")(
        spec.index, spec.learners, spec.seed, spec.incarnation, data_obj, inner, model,
        config_.batch_of(static_cast<uint32_t>(spec.index)), data_->context(), config_text_);
    const uint64_t torch_seed = derive_seed(
        spec.seed, "learner.torch", (static_cast<uint64_t>(spec.index) << 32) | spec.incarnation);
    return learner_mod.attr("Runner")(factory_, ctx, torch_seed);
  }

  const param_layout& layout() const override { return layout_; }
  std::string describe() const override {
    return "PyTorch learner, " + std::to_string(layout_.param_count()) + " parameters in " +
           std::to_string(layout_.tensors().size()) + " tensors";
  }
  void init(float_buffer& params, uint64_t seed) const override {
    DILOCO_CHECK(seed == config_.seed, "py_family::init: the model was built for another seed");
    DILOCO_CHECK(params.size() == init_.size(), "py_family::init: a buffer of another layout");
    std::memcpy(params.data(), init_.data(), init_.size() * sizeof(float));
  }
  result<std::unique_ptr<learner_compute>> make(const learner_spec& spec) const override {
    auto c = std::make_unique<py_compute>(*this, spec);
    py::object runner;
    {
      python_gil gil;
      try {
        runner = new_runner(spec);
      } catch (py::error_already_set& e) {
        return user_error(e);
      }
    }
    if (auto s = c->init(std::move(runner)); !s.ok()) return s;
    return std::unique_ptr<learner_compute>(std::move(c));
  }
  result<double> evaluate(const float_buffer& params) const override {
    DILOCO_CHECK(params.size() == init_.size(), "py_family::evaluate: a buffer of another layout");
    std::lock_guard<std::mutex> lock(mu_);
    std::memcpy(evaluator_->params().data(), params.data(), params.size() * sizeof(float));
    copies().eval_copies += 1;
    return evaluator_->evaluate();
  }

  const std::vector<std::vector<int64_t>>& shapes() const { return shapes_; }
  std::vector<std::vector<int64_t>> tensor_shapes() const override { return shapes_; }
  bool trains_on_run_data() const override { return run_data_; }
  bool is_pytorch() const override { return true; }
  const float_buffer& initial() const { return init_; }
  const run_config& config() const { return config_; }

 private:
  py::object factory_;
  run_config config_;
  std::string config_text_;
  std::shared_ptr<const data_source> data_;
  param_layout layout_;
  std::vector<std::vector<int64_t>> shapes_;
  bool run_data_ = true;  // learner 0 trains on the runtime's data (loss=), not its own (step=)
  float_buffer init_;
  mutable std::mutex mu_;
  std::unique_ptr<py_compute> evaluator_;
};

py_compute::py_compute(const py_family& family, const learner_spec& spec)
    : family_(family),
      spec_(spec),
      who_("learner " + std::to_string(spec.index)),
      pool_(spec.ahead) {}

// Checks the runner's module against the family's layout, then points it into this learner's
// buffers, set to the initial model.
status py_compute::init(py::object runner) {
  const param_layout& layout = family_.layout();
  params_ = std::make_shared<float_buffer>(layout.buffer_floats());
  grads_ = std::make_shared<float_buffer>(layout.buffer_floats());
  std::memcpy(params_->data(), family_.initial().data(), params_->size() * sizeof(float));
  copies().initial_copies += 1;
  python_gil gil;
  runner_ = std::move(runner);
  try {
    py::list entries = runner_.attr("layout")();
    if (entries.size() != layout.tensors().size()) {
      return status(errc::user_code, "its module has " + std::to_string(entries.size()) +
                                         " parameters, learner 0's has " +
                                         std::to_string(layout.tensors().size()));
    }
    std::vector<size_t> offsets;
    for (size_t i = 0; i < entries.size(); ++i) {
      auto t = entries[i].cast<py::tuple>();
      const auto name = t[0].cast<std::string>();
      const auto shape = t[1].cast<std::vector<int64_t>>();
      if (name != layout.at(i).name || shape != family_.shapes()[i]) {
        return status(errc::user_code, "parameter " + std::to_string(i) + " is " + name + " " +
                                           shape_text(shape) + ", learner 0's is " +
                                           layout.at(i).name + " " +
                                           shape_text(family_.shapes()[i]) +
                                           " (every learner must build the same model)");
      }
      offsets.push_back(layout.at(i).offset);
    }
    data_obj_ = runner_.attr("ctx").attr("data");
    data_ = data_obj_.attr("_cursor").cast<std::shared_ptr<data_handle>>();
    runner_.attr("bind")(share(params_), share(grads_), offsets);
    mirror_ = runner_.attr("mirror").cast<bool>();
    if (pool_ && runner_.attr("can_ahead").cast<bool>()) {
      shadow_params_ = std::make_shared<float_buffer>(params_->size());
      shadow_grads_ = std::make_shared<float_buffer>(grads_->size());
      runner_.attr("bind_shadow")(share(shadow_params_), share(shadow_grads_));
      pool_update_ = runner_.attr("pool_update").cast<bool>();
    }
  } catch (py::error_already_set& e) {
    return user_error(e);
  } catch (py::cast_error& e) {
    return status(errc::user_code, e.what());
  }
  return ok_status();
}

result<uint64_t> py_compute::step_tokens(py::handle returned, uint64_t cursor_before) const {
  if (data_->cursor.tokens > cursor_before) return data_->cursor.tokens - cursor_before;
  if (returned.is_none())
    return static_cast<uint64_t>(family_.config().batch_of(static_cast<uint32_t>(spec_.index)));
  // The tokens a step consumed: a whole number a step can take (a run's counts and merge weights
  // are built from it; 2^62 made a run that never ended, a negative one four cast errors).
  constexpr long long most = 1LL << 40;
  int overflow = 0;
  long long v = -1;
  if (PyLong_Check(returned.ptr()) && !PyBool_Check(returned.ptr()))
    v = PyLong_AsLongLongAndOverflow(returned.ptr(), &overflow);
  if (v < 0 || v > most || overflow != 0) {
    return status(errc::invalid_argument,
                  who_ + ": its step returned " + std::string(py::repr(returned)) +
                      " as the number of tokens it consumed; expected a whole number in [0, 2^40] "
                      "(or None: the batch)");
  }
  return static_cast<uint64_t>(v);
}

result<step_stats> py_compute::step(const adamw_config& inner, int64_t schedule_step) {
  if (auto f = take_failure(); !f.ok()) return f;
  // The step computed ahead, waited for here, or computed now: either way within the timeout.
  const watched_step watched(who_, family_.config().step_timeout_s);
  step_stats s;
  s.lr = inner.lr_at(std::max<int64_t>(0, schedule_step));
  if (job_ && job_->schedule_step == schedule_step && job_->inner.same_as(inner)) {
    const auto taken = wait_ahead();
    // The job ran the update it carried before the gradients: this only collects its outcome.
    if (auto u = settle(); !u.ok()) return u;
    // Nothing read the data meanwhile (the user's code may hold the cursor too), and the
    // gradients from the basis are at the parameters as they are.
    if (taken && data_->cursor.tokens == job_->cursor_before.tokens &&
        (!job_->shadow ||
         (basis_.size() == params_->size() &&
          std::memcmp(basis_.data(), params_->data(), basis_.size() * sizeof(float)) == 0))) {
      if (job_->shadow)
        std::memcpy(grads_->data(), shadow_grads_->data(), grads_->size() * sizeof(float));
      s.loss = taken->first;
      s.grad_norm = taken->second;
      s.tokens = job_->cursor_after.tokens - job_->cursor_before.tokens;
      data_->cursor = std::move(job_->cursor_after);
      job_.reset();
      copies().ahead_taken += 1;
      tokens_ += s.tokens;
      // A step that diverged is not applied, as in its turn (Runner.step).
      if (std::isfinite(s.loss)) {
        ++steps_;
        update_due_ = due_update{s.lr, inner.clip_norm, s.grad_norm};
      }
      return s;
    }
  }
  if (auto u = stop_ahead(); !u.ok()) return u;
  python_gil gil;
  const uint64_t before = data_->cursor.tokens;
  try {
    py::tuple out = runner_.attr("step")(s.lr, inner.clip_norm);
    s.loss = out[0].cast<double>();
    auto tokens = step_tokens(out[1], before);
    if (!tokens) return tokens.error();
    s.tokens = *tokens;
    s.grad_norm = out[2].cast<double>();
    refresh_ahead_ok();
  } catch (py::error_already_set& e) {
    return user_error(e);
  }
  if (std::isfinite(s.loss)) ++steps_;
  tokens_ += s.tokens;
  return s;
}

status py_compute::mirror_to_host(const std::vector<param_span>* spans, bool write, bool read) {
  python_gil gil;
  try {
    py::object which = py::none();
    if (spans != nullptr) {
      py::list ranges;
      for (const auto& s : *spans) ranges.append(py::make_tuple(s.offset, s.count));
      which = std::move(ranges);
    }
    runner_.attr("to_host")(which, write, read);
  } catch (py::error_already_set& e) {
    return user_error(e).with_context(who_ + "'s device mirror");
  }
  return ok_status();
}

void py_compute::refresh_ahead_ok() {
  ahead_ok_ = shadow_params_ != nullptr && runner_.attr("ahead_ok").cast<bool>();
}

void py_compute::compute_ahead(const adamw_config& inner, int64_t schedule_step) {
  if (!ahead_ok_) return;
  drop_ahead();
  submit_ahead(inner, schedule_step, false);
}

void py_compute::compute_ahead_after(const adamw_config& inner, int64_t schedule_step,
                                     const std::function<void(float_buffer&)>& change) {
  if (!ahead_ok_) return;
  drop_ahead();
  remember(settle());  // the basis is made from the parameters after the update
  basis_ = *params_;   // reuses basis_'s memory
  change(basis_);
  std::memcpy(shadow_params_->data(), basis_.data(), basis_.size() * sizeof(float));
  submit_ahead(inner, schedule_step, true);
}

// The batch is drawn here, from a copy of the cursor. The job runs the update due first (unless
// settle() or a job dropped before it claimed it), then computes the gradients; it touches nothing
// of the learner's but the user's module and optimizer, which nothing else calls until it is taken
// or dropped.
void py_compute::submit_ahead(const adamw_config& inner, int64_t schedule_step, bool shadow) {
  DILOCO_CHECK(!job_ && shadow_params_,
               "python learner: a step ahead over another, or without its buffers");
  DILOCO_CHECK(!shadow || !update_due_, "python learner: a basis made before the update");
  if (update_due_ && !pool_update_) remember(settle());  // a user's optimizer: in its turn
  if (update_due_) {
    DILOCO_CHECK(!update_, "python learner: an update both due and on the pool");
    update_ = std::make_shared<pool_update>();
    update_->what = *std::exchange(update_due_, std::nullopt);
  }
  job_.emplace();
  job_->inner = inner;
  job_->schedule_step = schedule_step;
  job_->shadow = shadow;
  job_->cursor_before = data_->cursor;
  job_->cursor_after = data_->cursor;
  const int B = data_->cursor.streams, C = data_->cursor.context;
  std::vector<uint8_t> x(static_cast<size_t>(B) * static_cast<size_t>(C)),
      y(static_cast<size_t>(B));
  data_->source->next_batch(job_->cursor_after, x.data(), y.data());
  // Only plain data in the job: it is destroyed on the pool thread, without the GIL.
  job_->result =
      pool_->submit([state = job_->state, update = update_, runner = &runner_, x = std::move(x),
                     y = std::move(y), B, C, shadow]() -> std::optional<std::pair<double, double>> {
        int queued = 0;
        const bool begun = state->compare_exchange_strong(queued, 1);
        if (update && !update->claimed.exchange(true)) {
          python_gil gil;
          status s = ok_status();
          try {
            runner->attr("update")(update->what.lr, update->what.clip, update->what.norm);
          } catch (py::error_already_set& e) {
            s = user_error(e);
          }
          update->done.set_value(std::move(s));
        } else if (update) {
          update->outcome.wait();  // settle() runs it on the loop's thread
        }
        if (!begun) return std::nullopt;
        if (update && !update->outcome.get().ok()) return std::nullopt;
        python_gil gil;
        try {
          py::array_t<uint8_t> xa({static_cast<py::ssize_t>(B), static_cast<py::ssize_t>(C)});
          py::array_t<uint8_t> ya({static_cast<py::ssize_t>(B)});
          std::memcpy(xa.mutable_data(), x.data(), x.size());
          std::memcpy(ya.mutable_data(), y.data(), y.size());
          py::object out = runner->attr("gradients_ahead")(xa, ya, shadow);
          if (out.is_none()) return std::nullopt;
          auto t = out.cast<py::tuple>();
          return std::make_pair(t[0].cast<double>(), t[1].cast<double>());
        } catch (py::error_already_set&) {
          return std::nullopt;  // the step in its turn meets the error again, and reports it
        } catch (py::cast_error&) {
          return std::nullopt;
        }
      });
}

// The step ahead's outcome, waited for without the GIL (the job needs it); none if it was
// called off before it began.
std::optional<std::pair<double, double>> py_compute::wait_ahead() {
  DILOCO_CHECK(job_.has_value(), "python learner: waiting for no step ahead");
  if (job_->waited) return job_->outcome;
  job_->waited = true;
  job_->outcome = without_gil([this] { return job_->result.get(); });
  return job_->outcome;
}

void py_compute::drop_ahead() {
  if (!job_) return;
  int queued = 0;
  if (!job_->waited && !never_call_off.load(std::memory_order_relaxed) &&
      job_->state->compare_exchange_strong(queued, 2)) {
    job_->waited = true;
    job_->called_off = true;
  }
  wait_ahead();
  const bool ran = !job_->called_off;
  data_->cursor = std::move(job_->cursor_before);
  job_.reset();
  if (!ran) return;
  copies().ahead_put_back += 1;
  python_gil gil;
  try {
    runner_.attr("discard")();
    refresh_ahead_ok();
  } catch (py::error_already_set& e) {
    // Putting the state back runs none of the user's code: a failure here is the runtime's.
    std::fprintf(stderr, "%s\n", e.what());
    DILOCO_CHECK(false, "python learner: a step ahead could not be put back");
  }
}

status py_compute::settle() {
  if (update_due_) {
    DILOCO_CHECK(!update_, "python learner: an update both due and on the pool");
    return update_here(*std::exchange(update_due_, std::nullopt));
  }
  if (!update_) return ok_status();
  const std::shared_ptr<pool_update> u = std::exchange(update_, nullptr);
  if (!u->claimed.exchange(true)) {
    // Its job has not begun (or was called off): the update runs here, in its turn.
    status s = update_here(u->what);
    u->done.set_value(s);
    return s;
  }
  return without_gil([&] { return u->outcome.get(); });
}

status py_compute::update_here(const due_update& u) {
  python_gil gil;
  try {
    runner_.attr("update_now")(u.lr, u.clip, u.norm);
    refresh_ahead_ok();
  } catch (py::error_already_set& e) {
    return user_error(e);
  }
  return ok_status();
}

result<double> py_compute::compute_gradients() {
  if (auto stopped = stop_for_call(); !stopped.ok()) return stopped;
  python_gil gil;
  const uint64_t before = data_->cursor.tokens;
  try {
    py::tuple out = runner_.attr("gradients")();
    auto tokens = step_tokens(out[1], before);
    if (!tokens) return tokens.error();
    pending_tokens_ = *tokens;
    return out[0].cast<double>();
  } catch (py::error_already_set& e) {
    return user_error(e);
  }
}

result<step_stats> py_compute::apply_gradients(const adamw_config& inner, int64_t schedule_step) {
  step_stats s;
  s.lr = inner.lr_at(std::max<int64_t>(0, schedule_step));
  if (auto stopped = stop_for_call(); !stopped.ok()) return stopped;
  python_gil gil;
  try {
    s.grad_norm = runner_.attr("apply")(s.lr, inner.clip_norm).cast<double>();
  } catch (py::error_already_set& e) {
    return user_error(e);
  }
  s.tokens = pending_tokens_;
  tokens_ += pending_tokens_;
  pending_tokens_ = 0;
  ++steps_;
  return s;
}

result<double> py_compute::evaluate() {
  if (auto stopped = stop_for_call(); !stopped.ok()) return stopped;
  python_gil gil;
  try {
    return runner_.attr("evaluate")().cast<double>();
  } catch (py::error_already_set& e) {
    return user_error(e);
  }
}

status py_compute::restart(int64_t schedule_step, uint64_t data_seed) {
  if (auto stopped = stop_for_call(); !stopped.ok()) return stopped;
  offset_ = schedule_step;
  steps_ = 0;
  const uint64_t tokens = data_->cursor.tokens;
  data_->cursor =
      data_->source->open_shard(data_seed, spec_.index, spec_.learners,
                                family_.config().batch_of(static_cast<uint32_t>(spec_.index)));
  data_->cursor.tokens = tokens;
  python_gil gil;
  try {
    runner_.attr("restart")();
  } catch (py::error_already_set& e) {
    return user_error(e);
  }
  return ok_status();
}

status py_compute::save(std::vector<uint8_t>& out) {
  if (auto stopped = stop_for_call(); !stopped.ok()) return stopped;
  std::vector<uint8_t> torch_state;
  {
    python_gil gil;
    try {
      py::bytes b = runner_.attr("save")();
      const std::string s = b;
      torch_state.assign(s.begin(), s.end());
    } catch (py::error_already_set& e) {
      return user_error(e);
    }
  }
  if (mirror_) {
    if (auto m = mirror_to_host(nullptr, false); !m.ok()) return m;
  }
  out = save_bytes(*params_, data_->cursor, offset_, steps_, tokens_, torch_state);
  out.insert(out.begin(), pytorch_state_tag, pytorch_state_tag + 4);
  return ok_status();
}

status py_compute::load(byte_view state) {
  if (auto stopped = stop_for_call(); !stopped.ok()) return stopped;
  float_buffer params;
  data_cursor cursor;
  int64_t offset = 0, steps = 0;
  uint64_t tokens = 0;
  std::vector<uint8_t> torch_state;
  // Tagged since the tag came (tensor/compute.hpp); a state saved before it loads as it is.
  if (is_pytorch_state(state)) state = state.subspan(4, state.size() - 4);
  if (auto s =
          load_bytes(state, who_ + "'s state", params, cursor, offset, steps, tokens, torch_state);
      !s.ok())
    return s;
  if (params.size() != params_->size()) {
    return status(errc::corrupt_data, who_ + ": the saved model has " +
                                          std::to_string(params.size()) + " floats, this one " +
                                          std::to_string(params_->size()));
  }
  std::memcpy(params_->data(), params.data(), params.size() * sizeof(float));
  if (mirror_) {
    python_gil gil;
    try {
      runner_.attr("host_written")();
    } catch (py::error_already_set& e) {
      return user_error(e);
    }
  }
  data_->cursor = cursor;
  offset_ = offset;
  steps_ = steps;
  tokens_ = tokens;
  python_gil gil;
  try {
    runner_.attr("load")(
        py::bytes(reinterpret_cast<const char*>(torch_state.data()), torch_state.size()));
  } catch (py::error_already_set& e) {
    return user_error(e);
  }
  return ok_status();
}

}  // namespace

std::shared_ptr<data_handle> open_data(std::shared_ptr<const data_source> source,
                                       const run_config& config, int index) {
  auto h = std::make_shared<data_handle>();
  h->source = std::move(source);
  h->cursor = h->source->open_shard(config.seed, index, config.learner_capacity(),
                                    config.batch_of(static_cast<uint32_t>(index)));
  return h;
}

std::shared_ptr<const model_family> family_for(const run_config& config, py::object learner) {
  auto data = data_source::build(config.data, config.model.context);
  if (!data) throw py::value_error(data.error().to_string());
  if (learner.is_none()) return builtin_mlp_family(config.model, config.batch, *data);
  auto made = learner_model(std::move(learner))(config, *data);
  if (!made) throw std::runtime_error(made.error().to_string());
  return *made;
}

model_maker learner_model(py::object factory) {
  // The maker (and the family) may outlive the Python call that set it up: hold the factory in
  // a shared object whose last release takes the GIL.
  // A maker kept as the process's model is released by the static destructors, after the
  // interpreter has finalized: then there is no GIL to take (taking it would wait forever) and
  // the object went with the interpreter.
  auto holder = std::shared_ptr<py::object>(new py::object(std::move(factory)), [](py::object* p) {
    if (Py_IsInitialized() == 0) return;
    python_gil gil;
    delete p;
  });
  return [holder](const run_config& config, std::shared_ptr<const data_source> data)
             -> result<std::shared_ptr<const model_family>> {
    std::shared_ptr<py_family> family;
    {
      python_gil gil;
      family = std::make_shared<py_family>(*holder, config, std::move(data));
    }
    if (auto s = family->build(); !s.ok()) return s;
    return std::shared_ptr<const model_family>(std::move(family));
  };
}

void bind_learner_types(py::module_& m) {
  py::class_<data_handle, std::shared_ptr<data_handle>>(m, "DataCursor")
      .def_property_readonly("batch", [](const data_handle& h) { return h.cursor.streams; })
      .def_property_readonly("context", [](const data_handle& h) { return h.cursor.context; })
      .def_property_readonly("tokens", [](const data_handle& h) { return h.cursor.tokens; })
      .def("next_batch",
           [](data_handle& h) {
             const auto B = static_cast<py::ssize_t>(h.cursor.streams);
             const auto C = static_cast<py::ssize_t>(h.cursor.context);
             py::array_t<uint8_t> x({B, C});
             py::array_t<uint8_t> y({B});
             h.source->next_batch(h.cursor, x.mutable_data(), y.mutable_data());
             return py::make_tuple(x, y);
           })
      .def("eval_set", [](const data_handle& h) {
        const auto& cx = h.source->eval_contexts();
        const auto& cy = h.source->eval_targets();
        const auto N = static_cast<py::ssize_t>(cy.size());
        const auto C = static_cast<py::ssize_t>(h.source->context());
        py::array_t<uint8_t> x({N, C});
        py::array_t<uint8_t> y({N});
        std::memcpy(x.mutable_data(), cx.data(), cx.size());
        std::memcpy(y.mutable_data(), cy.data(), cy.size());
        return py::make_tuple(x, y);
      });
}

}  // namespace python
}  // namespace diloco
