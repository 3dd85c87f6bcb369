#include "tensor/checksum.hpp"

#include <xxhash.h>

namespace diloco {

uint64_t checksum64(const void* data, size_t bytes, uint64_t seed) {
  return XXH3_64bits_withSeed(data, bytes, seed);
}

}  // namespace diloco
