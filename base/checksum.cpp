#include "base/checksum.hpp"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t is a complete type only with this
#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace diloco {

uint64_t checksum64(const void* data, size_t bytes, uint64_t seed) {
  return XXH3_64bits_withSeed(data, bytes, seed);
}

struct checksum_stream::state {
  XXH3_state_t xxh;
};

checksum_stream::checksum_stream(uint64_t seed) : state_(std::make_unique<state>()) {
  XXH3_64bits_reset_withSeed(&state_->xxh, seed);
}

checksum_stream::~checksum_stream() = default;

void checksum_stream::update(const void* data, size_t bytes) {
  XXH3_64bits_update(&state_->xxh, data, bytes);
}

uint64_t checksum_stream::digest() const {
  return XXH3_64bits_digest(&state_->xxh);
}

uint64_t copy_and_checksum(void* dst, const void* src, size_t bytes, uint64_t seed) {
  // Below this size one call is as fast; above, chunks that fit in L2 are hashed while hot.
  constexpr size_t chunk = 64 * 1024;
  if (bytes <= chunk) {
    if (bytes > 0) std::memcpy(dst, src, bytes);  // an empty source may be null
    return checksum64(dst, bytes, seed);
  }
  checksum_stream sum(seed);
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for (size_t at = 0; at < bytes; at += chunk) {
    const size_t n = std::min(chunk, bytes - at);
    std::memcpy(d + at, s + at, n);
    sum.update(d + at, n);
  }
  return sum.digest();
}

}  // namespace diloco
