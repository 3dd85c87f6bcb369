#include "tensor/params.hpp"

#include <algorithm>
#include <cstring>
#include <new>

#include "base/check.hpp"

namespace diloco {

size_t param_layout::add(std::string name, size_t rows, size_t cols, tensor_role role, int layer) {
  DILOCO_CHECK(rows > 0 && cols > 0, "params: a tensor of non-empty shape");
  DILOCO_CHECK(find(name) < 0, "params: tensor names are unique");
  tensor_info t;
  t.name = std::move(name);
  t.rows = rows;
  t.cols = cols;
  t.offset = buffer_floats_;
  t.role = role;
  t.layer = layer;
  const size_t padded = (t.size() + alignment_floats - 1) / alignment_floats * alignment_floats;
  buffer_floats_ += padded;
  param_count_ += t.size();
  layer_count_ = std::max(layer_count_, layer + 1);
  tensors_.push_back(std::move(t));
  return tensors_.size() - 1;
}

long param_layout::find(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].name == name) return static_cast<long>(i);
  }
  return -1;
}

void float_buffer::aligned_delete::operator()(float* p) const {
  ::operator delete[](p, std::align_val_t(64));
}

float_buffer::float_buffer(size_t size, no_fill) : size_(size) {
  if (size == 0) return;
  data_.reset(static_cast<float*>(::operator new[](size * sizeof(float), std::align_val_t(64))));
}

float_buffer::float_buffer(size_t size) : float_buffer(size, no_fill{}) {
  if (size > 0) std::memset(data_.get(), 0, size * sizeof(float));
}

float_buffer float_buffer::uninitialized(size_t size) {
  return float_buffer(size, no_fill{});
}

// The copy is written once (not zeroed first).
float_buffer::float_buffer(const float_buffer& other) : float_buffer(other.size_, no_fill{}) {
  if (size_ > 0) std::memcpy(data_.get(), other.data_.get(), size_ * sizeof(float));
}

float_buffer& float_buffer::operator=(const float_buffer& other) {
  if (this == &other) return *this;
  if (size_ != other.size_) *this = float_buffer(other.size_, no_fill{});
  if (size_ > 0) std::memcpy(data_.get(), other.data_.get(), size_ * sizeof(float));
  return *this;
}

void float_buffer::fill(float value) {
  std::fill(data_.get(), data_.get() + size_, value);
}

float_buffer take_spare(std::vector<float_buffer>& spare, size_t n) {
  for (size_t i = 0; i < spare.size(); ++i) {
    if (spare[i].size() == n) {
      float_buffer b = std::move(spare[i]);
      spare[i] = std::move(spare.back());
      spare.pop_back();
      return b;
    }
  }
  return float_buffer(n);
}

}  // namespace diloco
