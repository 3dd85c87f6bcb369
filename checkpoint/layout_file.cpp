#include "checkpoint/layout_file.hpp"

#include <cmath>

#include "checkpoint/file_io.hpp"
#include "checkpoint/frame.hpp"
#include "protocol/persist.hpp"

namespace diloco {

namespace {

constexpr std::array<char, 4> layout_magic = {'D', 'L', 'L', 'Y'};
constexpr uint32_t layout_version = 1;

struct tensor_record {
  std::string name;
  uint64_t rows = 0, cols = 0;
  uint8_t role = 0;
  int32_t layer = 0;
};

template <class F>
void persist_fields(F& f, tensor_record& x) {
  f(x.name, x.rows, x.cols, x.role, x.layer);
}

constexpr uint64_t max_tensors = 1 << 20;
constexpr uint64_t max_floats = uint64_t{1} << 34;  // 64 GiB of parameters

}  // namespace

status save_layout_model(const std::string& path, const layout_model& model) {
  std::vector<tensor_record> tensors;
  for (const auto& t : model.layout.tensors())
    tensors.push_back({t.name, t.rows, t.cols, static_cast<uint8_t>(t.role), t.layer});
  std::string description = model.description;
  float_buffer initial = model.initial;
  const auto payload = save_bytes(tensors, description, initial);
  const auto frame =
      make_frame(layout_magic, layout_version, byte_view(payload.data(), payload.size()));
  return write_file_atomic(path, byte_view(frame.data(), frame.size()));
}

result<layout_model> load_layout_model(const std::string& path) {
  auto bytes = read_file(path);
  if (!bytes) return bytes.error();
  auto payload =
      open_frame(byte_view(bytes->data(), bytes->size()), layout_magic, layout_version, path);
  if (!payload) return payload.error();
  std::vector<tensor_record> tensors;
  layout_model out;
  if (auto s = load_bytes(*payload, path, tensors, out.description, out.initial); !s.ok()) return s;
  if (tensors.empty() || tensors.size() > max_tensors)
    return status(errc::corrupt_data, path + ": " + std::to_string(tensors.size()) + " tensors");
  uint64_t floats = 0;
  for (const auto& t : tensors) {
    if (t.rows == 0 || t.cols == 0 || t.rows > max_floats / t.cols || t.role > 2 || t.layer < 0 ||
        t.name.empty() || out.layout.find(t.name) >= 0) {
      return status(errc::corrupt_data, path + ": tensor '" + t.name + "' (" +
                                            std::to_string(t.rows) + " x " +
                                            std::to_string(t.cols) + ") is not valid");
    }
    floats += t.rows * t.cols;
    if (floats > max_floats) return status(errc::corrupt_data, path + ": too many parameters");
    out.layout.add(t.name, t.rows, t.cols, static_cast<tensor_role>(t.role), t.layer);
  }
  if (out.initial.size() != out.layout.buffer_floats()) {
    return status(errc::corrupt_data, path + ": " + std::to_string(out.initial.size()) +
                                          " initial values for a layout of " +
                                          std::to_string(out.layout.buffer_floats()));
  }
  for (size_t i = 0; i < out.initial.size(); ++i) {
    if (!std::isfinite(out.initial[i]))
      return status(errc::non_finite,
                    path + ": initial value " + std::to_string(i) + " is not finite");
  }
  return out;
}

std::string layout_difference(const param_layout& a, const param_layout& b) {
  const auto& x = a.tensors();
  const auto& y = b.tensors();
  auto text = [](const tensor_info& t) {
    return t.name + " (" + std::to_string(t.rows) + " x " + std::to_string(t.cols) + ", role " +
           std::to_string(static_cast<int>(t.role)) + ", layer " + std::to_string(t.layer) + ")";
  };
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    if (x[i].name != y[i].name || x[i].rows != y[i].rows || x[i].cols != y[i].cols ||
        x[i].role != y[i].role || x[i].layer != y[i].layer)
      return "tensor " + std::to_string(i) + " is " + text(x[i]) + " against " + text(y[i]);
  }
  if (x.size() != y.size())
    return std::to_string(x.size()) + " tensors against " + std::to_string(y.size());
  return "";
}

}  // namespace diloco
