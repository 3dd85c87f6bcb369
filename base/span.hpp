// A pointer and a length, for C++17 code that cannot use std::span yet.
//
// Buffers in this project are owned by one flat allocation (see params.hpp); everything else
// looks at them through spans. An element's index is asserted in debug builds only: kernels
// index spans in their inner loops, where a check in every build would stop the compiler
// vectorising them. A subspan, taken once per loop at most, is checked in every build.
#pragma once

#include <cstddef>
#include <type_traits>
#include <vector>

#include "base/check.hpp"

namespace diloco {

template <class T>
class span {
 public:
  span() = default;
  span(T* data, size_t size) : data_(data), size_(size) {}
  template <class U, class A, class = std::enable_if_t<std::is_convertible_v<U (*)[], T (*)[]>>>
  span(std::vector<U, A>& v) : data_(v.data()), size_(v.size()) {}  // NOLINT
  template <class U, class A,
            class = std::enable_if_t<std::is_convertible_v<const U (*)[], T (*)[]>>>
  span(const std::vector<U, A>& v) : data_(v.data()), size_(v.size()) {}  // NOLINT
  template <class U, class = std::enable_if_t<std::is_convertible_v<U (*)[], T (*)[]>>>
  span(span<U> other) : data_(other.data()), size_(other.size()) {}  // NOLINT

  T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* begin() const { return data_; }
  T* end() const { return data_ + size_; }
  // Unchecked, as std::span's: it sits in the numerical loops. An index that comes from
  // outside is checked where it is read (a decoder's range check), or use subspan.
  T& operator[](size_t i) const { return data_[i]; }
  span subspan(size_t offset, size_t count) const {
    DILOCO_CHECK(offset <= size_ && count <= size_ - offset, "a subspan past the span's end");
    return span(data_ + offset, count);
  }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

using fspan = span<float>;
using cfspan = span<const float>;
using byte_view = span<const unsigned char>;

}  // namespace diloco
