// The built-in byte-level MLP as a model_family (tensor/compute.hpp): what every learner trains
// unless the run is given another model.
#pragma once

#include <memory>

#include "base/status.hpp"
#include "tensor/compute.hpp"
#include "tensor/data.hpp"
#include "tensor/model.hpp"

namespace diloco {

std::shared_ptr<const model_family> builtin_mlp_family(const model_config& model, int batch,
                                                       std::shared_ptr<const data_source> data);

// A model known only by its layout file (model.file): what the leader and syncer nodes of a
// deployed run with PyTorch learners use. It cannot make a learner's computation nor evaluate
// (both need the user's code, in the Python package): either is an error that says so.
result<std::shared_ptr<const model_family>> layout_file_family(const std::string& path);

}  // namespace diloco
