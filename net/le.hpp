// Little-endian integers in byte buffers (the wire formats of net/).
#pragma once

#include <cstddef>
#include <cstdint>

namespace diloco::le {

inline void put(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint64_t get(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace diloco::le

namespace diloco {

// The hello both of net/'s protocols open a connection with (24 bytes): magic (u32),
// version (u16), reserved (u16), the sending node (u32), reserved (u32), run identity (u64).
struct hello_fields {
  uint32_t magic = 0;
  uint16_t version = 0;
  uint32_t node = 0;
  uint64_t identity = 0;
};
constexpr size_t hello_size = 24;

inline void put_hello(uint8_t* p, const hello_fields& h) {
  for (size_t i = 0; i < hello_size; ++i) p[i] = 0;
  le::put(p, h.magic, 4);
  le::put(p + 4, h.version, 2);
  le::put(p + 8, h.node, 4);
  le::put(p + 16, h.identity, 8);
}
inline hello_fields get_hello(const uint8_t* p) {
  return {static_cast<uint32_t>(le::get(p, 4)), static_cast<uint16_t>(le::get(p + 4, 2)),
          static_cast<uint32_t>(le::get(p + 8, 4)), le::get(p + 16, 8)};
}

}  // namespace diloco
