// One flat float buffer for all parameters, and the layout that names the tensors in it.
//
// As in llm.c, every tensor is a view (offset, rows, cols) into a single allocation, and the
// gradients, AdamW moments, outer momentum and error-feedback residuals use the same layout.
// An optimizer is then one loop over the buffer and a fragment is a fixed list of spans.
// Offsets are aligned to 64 bytes so vector loads on any tensor start aligned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/span.hpp"

namespace diloco {

// Merge rule families: the embedding table is averaged, everything else may use RDA.
enum class tensor_role : uint8_t { embedding = 0, weight = 1, bias = 2 };

struct tensor_info {
  std::string name;
  size_t rows = 0;
  size_t cols = 0;
  size_t offset = 0;  // in floats from the start of the buffer
  tensor_role role = tensor_role::weight;
  int layer = 0;  // 0 = embedding, then hidden layers, last = output

  size_t size() const { return rows * cols; }
};

class param_layout {
 public:
  static constexpr size_t alignment_floats = 16;  // 64 bytes

  // Appends a (rows, cols) tensor; returns its index. Names must be unique.
  size_t add(std::string name, size_t rows, size_t cols, tensor_role role, int layer);

  const std::vector<tensor_info>& tensors() const { return tensors_; }
  const tensor_info& at(size_t index) const { return tensors_.at(index); }
  // Index of the tensor with this name, or -1.
  long find(const std::string& name) const;

  size_t buffer_floats() const { return buffer_floats_; }  // including alignment padding
  size_t param_count() const { return param_count_; }      // excluding padding
  int layer_count() const { return layer_count_; }

 private:
  std::vector<tensor_info> tensors_;
  size_t buffer_floats_ = 0;
  size_t param_count_ = 0;
  int layer_count_ = 0;
};

// A zero-initialized, 64-byte aligned float array; copying copies the contents.
class float_buffer {
 public:
  float_buffer() = default;
  explicit float_buffer(size_t size);
  // Not zeroed: for a caller that writes every value before any is read (a copy, a load).
  static float_buffer uninitialized(size_t size);
  float_buffer(const float_buffer& other);
  float_buffer& operator=(const float_buffer& other);
  float_buffer(float_buffer&&) noexcept = default;
  float_buffer& operator=(float_buffer&&) noexcept = default;

  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  size_t size() const { return size_; }
  float& operator[](size_t i) { return data_[i]; }
  float operator[](size_t i) const { return data_[i]; }
  fspan all() { return fspan(data(), size_); }
  cfspan all() const { return cfspan(data(), size_); }
  fspan view(const tensor_info& t) { return fspan(data() + t.offset, t.size()); }
  cfspan view(const tensor_info& t) const { return cfspan(data() + t.offset, t.size()); }
  void fill(float value);

 private:
  struct aligned_delete {
    void operator()(float* p) const;
  };
  struct no_fill {};
  float_buffer(size_t size, no_fill);
  std::unique_ptr<float[], aligned_delete> data_;
  size_t size_ = 0;
};

// A buffer of n floats from `spare` (buffers handed back for reuse, so that a hot path does not
// allocate), or a new zeroed one. A reused buffer keeps its old values: the caller overwrites.
float_buffer take_spare(std::vector<float_buffer>& spare, size_t n);

}  // namespace diloco
