// An encoded tensor (tensor/codec.hpp blob) as it travels in a message.
//
// Immutable and shared: a broadcast to M learners shares one buffer inside the process, and
// serialization writes the bytes as one raw block (CAF 0.17 moves a byte vector about 6x
// faster than a vector<float>). Decoding validates it; the message only carries it.
#pragma once

#include <caf/meta/type_name.hpp>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "tensor/span.hpp"

namespace diloco {

class tensor_blob {
 public:
  tensor_blob() = default;
  explicit tensor_blob(std::vector<uint8_t> bytes)
      : bytes_(std::make_shared<const std::vector<uint8_t>>(std::move(bytes))) {}

  size_t size() const { return bytes_ ? bytes_->size() : 0; }
  bool empty() const { return size() == 0; }
  byte_view view() const {
    return bytes_ ? byte_view(bytes_->data(), bytes_->size()) : byte_view();
  }
  const std::vector<uint8_t>& bytes() const { return bytes_ ? *bytes_ : empty_bytes(); }

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, tensor_blob& x) {
    if constexpr (std::is_same_v<typename Inspector::result_type, void>) {
      // String conversion (logs, to_string): the size, not megabytes of hex.
      uint64_t bytes = x.size();
      return f(caf::meta::type_name("tensor_blob"), bytes);
    } else if constexpr (Inspector::writes_state) {
      auto fresh = std::make_shared<std::vector<uint8_t>>();
      auto on_exit = [&] { x.bytes_ = std::move(fresh); };
      struct finally {
        decltype(on_exit)& fn;
        ~finally() { fn(); }
      } guard{on_exit};
      return f(caf::meta::type_name("tensor_blob"), *fresh);
    } else {
      // Saving reads the bytes; the const_cast only satisfies the inspector's signature.
      auto& bytes = const_cast<std::vector<uint8_t>&>(x.bytes());
      return f(caf::meta::type_name("tensor_blob"), bytes);
    }
  }

 private:
  static const std::vector<uint8_t>& empty_bytes();
  std::shared_ptr<const std::vector<uint8_t>> bytes_;
};

}  // namespace diloco
