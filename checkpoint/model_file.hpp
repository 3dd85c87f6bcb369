// A trained model on disk: the model's shape and its flat parameter buffer, in a checksummed
// frame (magic "DLMD", docs/formats.md). `diloco train --save` and `simulate --save-model`
// write it; `diloco train --init` starts from it.
#pragma once

#include <string>

#include "base/status.hpp"
#include "tensor/model.hpp"
#include "tensor/params.hpp"

namespace diloco {

struct model_file {
  model_config config;
  float_buffer params;  // in the layout of mlp_lm(config)
};

status save_model(const std::string& path, const model_config& config, const float_buffer& params);
result<model_file> load_model(const std::string& path);

}  // namespace diloco
