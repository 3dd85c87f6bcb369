// A model's layout and initial parameters on disk, for the nodes of a deployed run that do not
// run the model themselves (magic "DLLY", docs/formats.md). The Python package writes it from
// a user's PyTorch learner (`python3 -m diloco export-model`); the cluster file names it as
// `model.file`, and the leader and syncer nodes take the layout (fragments, codecs, merges)
// and the initial global model from it.
#pragma once

#include <string>

#include "base/status.hpp"
#include "tensor/params.hpp"

namespace diloco {

struct layout_model {
  param_layout layout;
  float_buffer initial;     // in the layout
  std::string description;  // what the model is, for logs
};

status save_layout_model(const std::string& path, const layout_model& model);
result<layout_model> load_layout_model(const std::string& path);

// "" when the two layouts are the same tensors (names, shapes, roles, layers, in order), else
// the first difference.
std::string layout_difference(const param_layout& a, const param_layout& b);

}  // namespace diloco
