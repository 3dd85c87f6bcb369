#include "checkpoint/model_file.hpp"

#include <cmath>
#include <cstring>

#include "checkpoint/file_io.hpp"
#include "checkpoint/frame.hpp"
#include "checkpoint/layout_file.hpp"
#include "checkpoint/safetensors.hpp"

namespace diloco {

namespace {
constexpr std::array<char, 4> model_magic = {'D', 'L', 'M', 'D'};
constexpr uint32_t model_version = 1;
constexpr size_t shape_fields = 5;
}  // namespace

status save_model(const std::string& path, const model_config& config, const float_buffer& params) {
  if (auto st = config.validate(); !st.ok()) return st;
  const mlp_lm model(config);
  if (params.size() != model.layout().buffer_floats()) {
    return status(errc::shape_mismatch, "save_model: parameter buffer does not match the model");
  }
  const int32_t shape[shape_fields] = {config.vocab, config.context, config.embed_dim,
                                       config.hidden, config.hidden_layers};
  std::vector<uint8_t> payload(sizeof shape + params.size() * sizeof(float));
  std::memcpy(payload.data(), shape, sizeof shape);
  std::memcpy(payload.data() + sizeof shape, params.data(), params.size() * sizeof(float));
  const auto frame =
      make_frame(model_magic, model_version, byte_view(payload.data(), payload.size()));
  return write_file_atomic(path, byte_view(frame.data(), frame.size()));
}

result<model_file> load_model(const std::string& path) {
  auto bytes = map_whole_file(path);
  if (!bytes) return bytes.error();
  auto payload = open_frame(bytes->view(), model_magic, model_version, path);
  if (!payload) return payload.error();
  int32_t shape[shape_fields];
  if (payload->size() < sizeof shape)
    return status(errc::corrupt_data, path + ": model shape missing");
  std::memcpy(shape, payload->data(), sizeof shape);
  model_file out;
  out.config = model_config{shape[0], shape[1], shape[2], shape[3], shape[4], ""};
  if (auto st = out.config.validate(); !st.ok()) return st.with_context(path);
  const mlp_lm model(out.config);
  const size_t floats = model.layout().buffer_floats();
  if (payload->size() != sizeof shape + floats * sizeof(float)) {
    return status(errc::corrupt_data, path + ": " + std::to_string(payload->size() - sizeof shape) +
                                          " parameter bytes for a model that has " +
                                          std::to_string(floats * sizeof(float)));
  }
  out.params = float_buffer::uninitialized(floats);  // every value copied below
  std::memcpy(out.params.data(), payload->data() + sizeof shape, floats * sizeof(float));
  for (size_t i = 0; i < floats; ++i) {
    if (!std::isfinite(out.params[i])) {
      return status(errc::non_finite, path + ": parameter " + std::to_string(i) + " is NaN or Inf");
    }
  }
  return out;
}

result<std::string> save_run_model(const std::string& path, const model_config& config,
                                   const model_family& family, const float_buffer& params) {
  const param_layout& layout = family.layout();
  if (params.size() != layout.buffer_floats())
    return status(errc::shape_mismatch, "save_model: " + std::to_string(params.size()) +
                                            " floats for a model of " +
                                            std::to_string(layout.buffer_floats()));
  // A PyTorch learner's model (in this process, or named by model.file on a deployed run's
  // leader) goes to its module: safetensors, whatever its layout.
  bool builtin = false;
  if (!is_safetensors_path(path) && !family.is_pytorch() && config.file.empty() &&
      config.validate().ok()) {
    const mlp_lm mlp(config);
    builtin = layout_difference(layout, mlp.layout()).empty();
  }
  if (builtin) {
    if (auto st = save_model(path, config, params); !st.ok()) return st;
    return std::string("dlmd");
  }
  std::map<std::string, std::string> meta{
      {"format", "pt"}, {"producer", "diloco"}, {"model", family.describe()}};
  auto tensors = layout_tensors(layout, params, family.tensor_shapes());
  if (auto st = save_safetensors(path, tensors, meta); !st.ok()) return st;
  return std::string("safetensors");
}

}  // namespace diloco
