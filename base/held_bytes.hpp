// Immutable bytes shared by whoever holds them, whatever owns the memory: a byte vector, or a
// read-only mapping of a file (checkpoint/snapshot_files.cpp maps a snapshot's parts instead of
// copying them into buffers of their own). A copy shares the bytes; the owner goes when the last
// holder does.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/span.hpp"

namespace diloco {

class held_bytes {
 public:
  held_bytes() = default;
  // A byte vector's bytes (shared, not copied). Implicit: a vector held by a shared pointer is
  // what most callers have.
  held_bytes(std::shared_ptr<const std::vector<uint8_t>> v)  // NOLINT
      : data_(v ? v->data() : nullptr), size_(v ? v->size() : 0), owner_(std::move(v)) {}
  explicit held_bytes(std::vector<uint8_t> v)
      : held_bytes(std::make_shared<const std::vector<uint8_t>>(std::move(v))) {}
  // `bytes`, kept alive by `owner` (which must hold them unchanged while it lives).
  held_bytes(std::shared_ptr<const void> owner, byte_view bytes)
      : data_(bytes.data()), size_(bytes.size()), owner_(std::move(owner)) {}

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  byte_view view() const { return byte_view(data_, size_); }
  // `n` bytes from `offset`, held by the same owner.
  held_bytes sub(size_t offset, size_t n) const {
    return held_bytes(owner_, view().subspan(offset, n));
  }
  // Whether anything is held (an empty vector is held; a default-made value is not).
  explicit operator bool() const { return owner_ != nullptr; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<const void> owner_;
};

}  // namespace diloco
