// A learner's computation behind one small interface, whatever the model: the built-in MLP
// (runtime/builtin_model.cpp) and a user's PyTorch module (python/) implement it.
//
// The runtime sees a model as named tensors laid out in one flat float buffer (param_layout):
// fragments, codecs and merges are built from the names and shapes. Between steps the runtime
// reads and writes that buffer (outer gradients, merges of the global fragment); during a
// step the computation trains it in place. Nothing here knows about actors or messages.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/span.hpp"
#include "base/status.hpp"
#include "tensor/fragment.hpp"
#include "tensor/optim.hpp"
#include "tensor/params.hpp"

namespace diloco {

class data_source;
class job_pool;

struct step_stats {
  double loss = 0.0;       // mean loss of the step's batch (nats per token for a language model)
  double grad_norm = 0.0;  // before clipping
  double lr = 0.0;
  uint64_t tokens = 0;  // tokens the step trained on
  uint64_t steps = 1;   // inner steps it counts as (a user's step may take several)
};

// What one learner's computation is made for.
struct learner_spec {
  int index = 0;             // the learner's slot
  int learners = 1;          // slots of the run (data shards are cut for this many)
  uint64_t seed = 0;         // the run seed
  uint32_t incarnation = 0;  // 0 for the first process on the slot, then one more per restart
  int batch = 0;             // tokens per inner step of this learner (0: the family's)
  // Threads a computation may use to compute its next step ahead (null: none). Whatever the
  // threads, it computes the same bits: ahead or not is a matter of time, never of result.
  std::shared_ptr<job_pool> ahead;
  // A saved state is loaded into the computation next (load()): it draws no initial model and
  // leaves the buffers that state fills unset, so that a resume does not write every
  // model-sized buffer once only to have the load write it again.
  bool restoring = false;
};

// The first bytes of a PyTorch learner's saved state (python/py_learner.cpp).
constexpr char pytorch_state_tag[4] = {'D', 'L', 'P', 'Y'};
inline bool is_pytorch_state(byte_view state) {
  return state.size() >= 4 && std::equal(state.begin(), state.begin() + 4,
                                         reinterpret_cast<const unsigned char*>(pytorch_state_tag));
}

class learner_compute {
 public:
  virtual ~learner_compute() = default;

  // The parameters, in the family's layout.
  virtual float_buffer& params() = 0;
  // The same for reading only: unlike params(), it keeps a step computed ahead (which reads
  // them too).
  virtual const float_buffer& params_to_read() { return params(); }
  // The same for these spans of the buffer only (a fragment's), to read them, or to read and
  // write them. A computation whose parameters live elsewhere (a PyTorch module on a device:
  // python/, the device mirror) keeps params() as their host copy: it brings the spans up to
  // date here and takes the ones written back before its next step, so a sync copies one
  // fragment each way, not the model.
  virtual const float_buffer& spans_to_read(const std::vector<param_span>& spans) {
    (void)spans;
    return params_to_read();
  }
  virtual float_buffer& spans_to_write(const std::vector<param_span>& spans) {
    (void)spans;
    return params();
  }
  // The same to write these spans without reading them first (a merge that adopts the global
  // values, alpha 0): a device mirror copies nothing to the host for them.
  virtual float_buffer& spans_to_overwrite(const std::vector<param_span>& spans) {
    return spans_to_write(spans);
  }
  // One inner step at the learning rate of schedule step `schedule_step`.
  virtual result<step_stats> step(const adamw_config& inner, int64_t schedule_step) = 0;
  // A hint: the next call will likely be step(inner, schedule_step) with nothing changed in
  // between. A computation with threads (learner_spec::ahead) may start that step now, writing
  // nothing of its state; step() then takes the result if nothing did change (the parameters
  // through params(), a load or restart, another inner config or schedule step), and
  // otherwise computes the step itself. Either way the same bits.
  virtual void compute_ahead(const adamw_config& inner, int64_t schedule_step) {
    (void)inner;
    (void)schedule_step;
  }
  // The same hint when the parameters will change first, as `change` changes a copy of them
  // (called there and then; a merge of the global model due before the next step). step()
  // takes the step computed ahead only if the parameters did become those bits.
  virtual void compute_ahead_after(const adamw_config& inner, int64_t schedule_step,
                                   const std::function<void(float_buffer&)>& change) {
    (void)inner;
    (void)schedule_step;
    (void)change;
  }
  // Data parallel: the step in two halves, with the gradients (in the same layout) averaged
  // across learners in between.
  virtual result<double> compute_gradients() = 0;
  virtual float_buffer& grads() = 0;
  virtual result<step_stats> apply_gradients(const adamw_config& inner, int64_t schedule_step) = 0;
  // Mean loss on the run's evaluation set.
  virtual result<double> evaluate() = 0;
  // After a crash: fresh optimizer state, the schedule continued at `schedule_step`, a fresh
  // part of the data (order from `data_seed`). The parameters are the caller's to set.
  virtual status restart(int64_t schedule_step, uint64_t data_seed) = 0;
  // Inner steps since the slot began (across restarts) and tokens trained on.
  virtual int64_t steps_done() const = 0;
  virtual uint64_t tokens_done() const = 0;
  // The computation's own state for snapshots: parameters, optimizer, data position.
  virtual status save(std::vector<uint8_t>& out) = 0;
  virtual status load(byte_view state) = 0;
};

// A model: its layout and how to make a learner's computation of it. Immutable and shared by
// every learner of a process; every process of a deployment builds the same one.
class model_family {
 public:
  virtual ~model_family() = default;
  virtual const param_layout& layout() const = 0;
  // One line for logs and reports: what the model is.
  virtual std::string describe() const = 0;
  // The run's initial global model (every learner starts from it).
  virtual void init(float_buffer& params, uint64_t seed) const = 0;
  // A learner's computation, its parameters set to the initial global model.
  virtual result<std::unique_ptr<learner_compute>> make(const learner_spec& spec) const = 0;
  // The evaluation loss of a parameter buffer in this layout (the final global model).
  virtual result<double> evaluate(const float_buffer& params) const = 0;
  // Whether learners of this model can run in this process (a model known only by its layout
  // file cannot: its learners need the Python package).
  virtual status runnable() const { return ok_status(); }
  // Multiply-adds x 6 per trained token (0 when unknown): for throughput in FLOP/s.
  virtual double train_flops_per_token() const { return 0.0; }
  // Each tensor's shape as the model's own code has it (a PyTorch module's parameter shapes),
  // for a saved model that loads back into it; empty: rows x cols of the layout.
  virtual std::vector<std::vector<int64_t>> tensor_shapes() const { return {}; }
  // Whether the learners train on the run's data (then its entropy rate, where known, is the
  // floor of their loss); false for a learner that brings its own.
  virtual bool trains_on_run_data() const { return true; }
  // Whether this is a user's PyTorch learner (python/): its learners' saved states are its own
  // (they begin with pytorch_state_tag), which no other model can load.
  virtual bool is_pytorch() const { return false; }
};

}  // namespace diloco
