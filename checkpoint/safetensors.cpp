#include "checkpoint/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.hpp"
#include "checkpoint/file_io.hpp"

namespace diloco {

namespace {
// A header longer than this is not a model's (the format's own readers stop at 100 MB too).
constexpr uint64_t max_header_bytes = 100u << 20;
}  // namespace

bool is_safetensors_path(const std::string& path) {
  static const std::string ext = ".safetensors";
  return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

std::vector<named_tensor> layout_tensors(const param_layout& layout, const float_buffer& params,
                                         const std::vector<std::vector<int64_t>>& shapes) {
  DILOCO_CHECK(params.size() >= layout.buffer_floats(),
               "layout_tensors: a buffer smaller than its layout");
  DILOCO_CHECK(shapes.empty() || shapes.size() == layout.tensors().size(),
               "layout_tensors: shapes for another number of tensors");
  std::vector<named_tensor> out;
  for (size_t i = 0; i < layout.tensors().size(); ++i) {
    const tensor_info& t = layout.at(i);
    named_tensor n;
    n.name = t.name;
    n.shape = shapes.empty()
                  ? std::vector<int64_t>{static_cast<int64_t>(t.rows), static_cast<int64_t>(t.cols)}
                  : shapes[i];
    n.data = params.data() + t.offset;
    n.floats = t.size();
    out.push_back(std::move(n));
  }
  return out;
}

status save_safetensors(const std::string& path, const std::vector<named_tensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  std::vector<byte_view> pieces;
  pieces.reserve(tensors.size() + 2);
  for (const auto& t : tensors) {
    int64_t count = 1;
    for (int64_t d : t.shape) {
      if (d < 0)
        return status(errc::invalid_argument,
                      path + ": tensor " + t.name + " has a negative dimension");
      count *= d;
    }
    if (static_cast<uint64_t>(count) != t.floats)
      return status(errc::shape_mismatch, path + ": tensor " + t.name + "'s shape holds " +
                                              std::to_string(count) + " values, its data " +
                                              std::to_string(t.floats));
    if (t.name == "__metadata__" || header.contains(t.name))
      return status(errc::invalid_argument, path + ": tensor name " + t.name + " is used twice");
    const uint64_t bytes = t.floats * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  // The data starts 8-byte aligned (the format allows trailing spaces in the header).
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');
  uint8_t length[8];
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(n >> (8 * i));
  pieces.emplace_back(length, 8);
  pieces.emplace_back(reinterpret_cast<const unsigned char*>(text.data()), text.size());
  for (const auto& t : tensors)
    pieces.emplace_back(reinterpret_cast<const unsigned char*>(t.data), t.floats * sizeof(float));
  return write_file_atomic(path, pieces);
}

result<safetensors_file> load_safetensors(const std::string& path) {
  auto bytes = map_whole_file(path);
  if (!bytes) return bytes.error();
  const byte_view b = bytes->view();
  auto bad = [&](const std::string& what) {
    return status(errc::corrupt_data, path + ": " + what);
  };
  if (b.size() < 8) return bad("shorter than a safetensors header");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(b[static_cast<size_t>(i)]) << (8 * i);
  if (n > max_header_bytes || n > b.size() - 8)
    return bad("header length " + std::to_string(n) + " does not fit the file (" +
               std::to_string(b.size()) + " bytes)");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(b.begin() + 8, b.begin() + 8 + static_cast<ptrdiff_t>(n));
  } catch (const nlohmann::json::exception& e) {
    return bad(std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) return bad("header is not a JSON object");
  const size_t data_bytes = b.size() - 8 - n;
  if (data_bytes % sizeof(float) != 0) return bad("data is not whole float32 values");
  safetensors_file out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) return bad("__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) return bad("__metadata__." + m.key() + " is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const auto& v = it.value();
    const std::string where = "tensor " + it.key();
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      return bad(where + ": needs dtype, shape and data_offsets");
    if (v["dtype"] != "F32")
      return bad(where + ": dtype " + v["dtype"].dump() + " (diloco reads F32 models)");
    safetensors_file::entry e;
    e.name = it.key();
    uint64_t count = 1;
    if (!v["shape"].is_array()) return bad(where + ": shape is not a list");
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) return bad(where + ": shape holds " + d.dump());
      const auto dim = d.get<uint64_t>();
      if (dim != 0 && count > (data_bytes / sizeof(float)) / dim)
        return bad(where + ": shape larger than the file");
      count *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      return bad(where + ": data_offsets is not [begin, end]");
    const auto begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_bytes || end - begin != count * sizeof(float) ||
        begin % sizeof(float) != 0)
      return bad(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "] do not hold its shape within the " + std::to_string(data_bytes) +
                 " data bytes");
    e.offset = begin / sizeof(float);
    e.floats = count;
    ranges.emplace_back(begin, end);
    out.tensors.push_back(std::move(e));
  }
  // The format's rule: the tensors cover the data exactly, without holes or overlaps.
  std::sort(ranges.begin(), ranges.end());
  uint64_t expect = 0;
  for (const auto& r : ranges) {
    if (r.first != expect)
      return bad("tensors overlap or leave a hole at byte " + std::to_string(expect));
    expect = r.second;
  }
  if (expect != data_bytes) return bad("data bytes beyond the last tensor");
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const auto& x, const auto& y) { return x.offset < y.offset; });
  out.data = float_buffer::uninitialized(data_bytes / sizeof(float));  // every value copied below
  if (data_bytes > 0) std::memcpy(out.data.data(), b.data() + 8 + n, data_bytes);
  for (size_t i = 0; i < out.data.size(); ++i) {
    if (!std::isfinite(out.data[i])) return bad("value " + std::to_string(i) + " is NaN or Inf");
  }
  return out;
}

}  // namespace diloco
