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

}  // namespace diloco
