// A user's PyTorch learner as a model_family (tensor/compute.hpp): the C++ learner actors call
// it through the interface, and it calls the user's code (python/diloco/_learner.py) holding
// the GIL. The parameters live in the runtime's flat buffer; the module's tensors are views.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "runtime/env.hpp"
#include "tensor/data.hpp"

namespace diloco::python {

// The maker of a run's model from a learner factory (a Python callable).
model_maker learner_model(pybind11::object factory);

// What the Python layer copied of models: the initial values into each learner's buffer, and
// the evaluated final model. No sync copies anything: the test suite checks that these do not
// grow with the number of syncs.
struct copy_counts {
  std::atomic<uint64_t> initial_copies{0};  // a learner's buffer set to the initial model
  std::atomic<uint64_t> eval_copies{0};     // a model copied into the evaluator
  // Steps computed ahead on a simulation's threads: taken as the step, or put back.
  std::atomic<uint64_t> ahead_taken{0};
  std::atomic<uint64_t> ahead_put_back{0};
};
copy_counts& copies();

// For tests only: a step ahead dropped before it began is not called off but waited for and put
// back, so whether a step is put back depends on the run alone and not on the pool's timing.
void set_never_call_off(bool on);

// One learner's position in the run's data, shared with its Python Data object.
struct data_handle {
  std::shared_ptr<const data_source> source;
  data_cursor cursor;
};
// Learner `index`'s part of the run's data: the shard a built-in learner on that slot reads.
std::shared_ptr<data_handle> open_data(std::shared_ptr<const data_source> source,
                                       const run_config& config, int index);

// A run's model outside any run (the bindings that step a learner by hand or export a layout):
// the built-in MLP when `learner` is None, else the user's. Throws on a bad config or learner.
std::shared_ptr<const model_family> family_for(const run_config& config, pybind11::object learner);

void bind_learner_types(pybind11::module_& m);

}  // namespace diloco::python
