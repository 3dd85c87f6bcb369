// A trained model as a safetensors file: the format PyTorch users load without running code
// (an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and
// byte range, then the raw little-endian data). `diloco simulate --save-model FILE.safetensors`
// and the Python package write it with the module's own parameter names and shapes, so
// `module.load_state_dict(safetensors.torch.load_file(FILE))` (or diloco.load_model) takes it
// back. docs/formats.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "tensor/params.hpp"

namespace diloco {

struct named_tensor {
  std::string name;
  std::vector<int64_t> shape;  // product = the tensor's floats
  const float* data = nullptr;
  size_t floats = 0;
};

// Writes float32 tensors (in the order given) and string metadata atomically.
status save_safetensors(const std::string& path, const std::vector<named_tensor>& tensors,
                        const std::map<std::string, std::string>& metadata);

struct safetensors_file {
  struct entry {
    std::string name;
    std::vector<int64_t> shape;
    size_t offset = 0;  // in floats, into `data`
    size_t floats = 0;
  };
  std::vector<entry> tensors;  // in the order of their data
  std::map<std::string, std::string> metadata;
  float_buffer data;
};

// Reads a float32 safetensors file; every error names the file and what is wrong with it.
result<safetensors_file> load_safetensors(const std::string& path);

// A parameter buffer of `layout` as tensors, each with the shape `shapes` gives it (empty: rows x
// cols of the layout).
std::vector<named_tensor> layout_tensors(const param_layout& layout, const float_buffer& params,
                                         const std::vector<std::vector<int64_t>>& shapes);

// Whether a model file path asks for safetensors (by its extension).
bool is_safetensors_path(const std::string& path);

}  // namespace diloco
