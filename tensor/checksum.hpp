// Content checksums (XXH3, 64 bit) for encoded blobs, snapshot files and replay tapes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace diloco {

uint64_t checksum64(const void* data, size_t bytes, uint64_t seed = 0);

}  // namespace diloco
