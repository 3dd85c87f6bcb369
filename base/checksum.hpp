// Content checksums (XXH3, 64 bit) for encoded blobs, snapshot files and replay tapes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace diloco {

uint64_t checksum64(const void* data, size_t bytes, uint64_t seed = 0);

// The same checksum computed over data that arrives in pieces; equal to checksum64 of the
// concatenation with the same seed.
class checksum_stream {
 public:
  explicit checksum_stream(uint64_t seed = 0);
  ~checksum_stream();
  checksum_stream(const checksum_stream&) = delete;
  checksum_stream& operator=(const checksum_stream&) = delete;

  void update(const void* data, size_t bytes);
  uint64_t digest() const;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

// Copies `bytes` from src to dst and returns checksum64 of them, reading the data once.
uint64_t copy_and_checksum(void* dst, const void* src, size_t bytes, uint64_t seed);

}  // namespace diloco
