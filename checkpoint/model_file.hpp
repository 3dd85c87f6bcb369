// A trained model on disk: the model's shape and its flat parameter buffer, in a checksummed
// frame (magic "DLMD", docs/formats.md). `diloco train --save` and `simulate --save-model`
// write it; `diloco train --init` starts from it.
#pragma once

#include <string>

#include "base/status.hpp"
#include "tensor/compute.hpp"
#include "tensor/model.hpp"
#include "tensor/params.hpp"

namespace diloco {

struct model_file {
  model_config config;
  float_buffer params;  // in the layout of mlp_lm(config)
};

status save_model(const std::string& path, const model_config& config, const float_buffer& params);
result<model_file> load_model(const std::string& path);

// A run's final model as `path` asks: safetensors (checkpoint/safetensors.hpp) with the model's
// own tensor names and shapes when the path ends in .safetensors or when the model is not the
// built-in MLP of `config` (a PyTorch learner's, or one named by model.file: the module loads
// it); else the DLMD file of save_model. Returns the format written ("safetensors" or "dlmd").
result<std::string> save_run_model(const std::string& path, const model_config& config,
                                   const model_family& family, const float_buffer& params);

}  // namespace diloco
