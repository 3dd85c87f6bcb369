// An encoded tensor (tensor/codec.hpp blob) as it travels in a message.
//
// Immutable and shared: a broadcast to M learners shares one buffer inside the process, and
// serialization writes the bytes as one raw block (CAF 0.17 moves a byte vector about 6x
// faster than a vector<float>). Decoding validates it; the message only carries it.
//
// Between the processes of a deployed run the bytes may travel apart, on the bulk channel
// (net/bulk_channel.hpp): the sender replaces the blob by a reference (`reference(id, size)`)
// and CAF serializes only that; the receiving process's resolver (set_resolver) turns the
// reference back into the bytes while the message is deserialized. A reference that cannot
// be resolved arrives as an empty blob, which decoding rejects like any malformed one.
#pragma once

#include <caf/deserializer.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>
#include <caf/serializer.hpp>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "base/held_bytes.hpp"
#include "base/span.hpp"

namespace diloco {

// A byte vector's field read in place: loading from memory, a view of the bytes where they
// are (no copy; valid while the input is); saving, the same bytes as a std::vector<uint8_t>
// (protocol/persist.hpp).
struct bytes_in_place {
  byte_view bytes;
};

class tensor_blob {
 public:
  tensor_blob() = default;
  explicit tensor_blob(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  explicit tensor_blob(std::shared_ptr<const std::vector<uint8_t>> bytes)
      : bytes_(std::move(bytes)) {}
  // Bytes owned elsewhere (a mapped snapshot file's part), shared as they are.
  explicit tensor_blob(held_bytes bytes) : bytes_(std::move(bytes)) {}

  using bytes_ptr = std::shared_ptr<const std::vector<uint8_t>>;
  // A blob whose `size` bytes travel apart under `id` (bulk channel); it holds no bytes.
  static tensor_blob reference(uint64_t id, uint64_t size) {
    tensor_blob b;
    b.ref_id_ = id;
    b.ref_size_ = size;
    return b;
  }
  bool is_reference() const { return ref_id_ != 0; }
  uint64_t reference_id() const { return ref_id_; }
  const held_bytes& shared_bytes() const { return bytes_; }

  // The process's resolver of references: the bytes of (id, size), or nullptr when they did
  // not come. Set once by a deployed node before it connects; none by default.
  using resolver = bytes_ptr (*)(uint64_t id, uint64_t size);
  static void set_resolver(resolver r);
  static bytes_ptr resolve(uint64_t id, uint64_t size);

  size_t size() const { return bytes_.size(); }
  bool empty() const { return size() == 0; }
  byte_view view() const { return bytes_.view(); }
  // A copy of the bytes in a vector of their own.
  std::vector<uint8_t> copy() const { return std::vector<uint8_t>(view().begin(), view().end()); }

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, tensor_blob& x) {
    if constexpr (std::is_same_v<typename Inspector::result_type, void>) {
      // String conversion (logs, to_string): the size, not megabytes of hex.
      uint64_t bytes = x.size();
      return f(caf::meta::type_name("tensor_blob"), bytes);
    } else if constexpr (std::is_base_of_v<caf::serializer, Inspector>) {
      // CAF's wire format (messages between processes): a kind byte, then the bytes (0) or
      // the reference (1). The bytes as CAF writes a byte vector: its length, then them raw.
      uint8_t kind = x.is_reference() ? 1 : 0;
      if (kind == 1) return f(caf::meta::type_name("tensor_blob"), kind, x.ref_id_, x.ref_size_);
      if (auto e = f(caf::meta::type_name("tensor_blob"), kind)) return e;
      size_t n = x.size();
      if (auto e = f.begin_sequence(n)) return e;
      if (n > 0) {
        if (auto e = f.apply_raw(n, const_cast<uint8_t*>(x.view().data()))) return e;
      }
      return f.end_sequence();
    } else if constexpr (std::is_base_of_v<caf::deserializer, Inspector>) {
      uint8_t kind = 0;
      if (auto e = f(kind)) return e;
      if (kind == 1) {
        uint64_t id = 0, size = 0;
        if (auto e = f(id, size)) return e;
        x = tensor_blob(resolve(id, size));
        return {};
      }
      if (kind != 0) return caf::make_error(caf::sec::malformed_basp_message);
      auto fresh = std::make_shared<std::vector<uint8_t>>();
      auto e = f(*fresh);
      x = tensor_blob(bytes_ptr(std::move(fresh)));
      return e;
    } else if constexpr (Inspector::writes_state) {
      auto fresh = std::make_shared<std::vector<uint8_t>>();
      auto on_exit = [&] { x.bytes_ = held_bytes(bytes_ptr(std::move(fresh))); };
      struct finally {
        decltype(on_exit)& fn;
        ~finally() { fn(); }
      } guard{on_exit};
      return f(caf::meta::type_name("tensor_blob"), *fresh);
    } else {
      // Saving (protocol/persist.hpp): the bytes as a byte vector's.
      bytes_in_place saved{x.view()};
      return f(caf::meta::type_name("tensor_blob"), saved);
    }
  }

 private:
  held_bytes bytes_;
  uint64_t ref_id_ = 0;  // a reference: the bytes travel apart (0: not a reference)
  uint64_t ref_size_ = 0;
};

}  // namespace diloco
