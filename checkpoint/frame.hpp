// The frame every file of ours is wrapped in (docs/formats.md): a magic naming the kind of
// file, a format version, the payload length and an XXH3 checksum of the payload. Reading a
// frame checks all four, so a truncated, corrupted or foreign file is an error that names the
// file and the problem, never bad data.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/span.hpp"
#include "base/status.hpp"

namespace diloco {

constexpr size_t frame_header_bytes = 24;

// Wraps payload: magic (4 bytes), version u32, payload length u64, checksum u64, payload.
std::vector<uint8_t> make_frame(const std::array<char, 4>& magic, uint32_t version,
                                byte_view payload);

// The 24 header bytes of a frame whose payload has `length` bytes and checksum `checksum`.
std::array<uint8_t, frame_header_bytes> make_frame_header(const std::array<char, 4>& magic,
                                                         uint32_t version, uint64_t length,
                                                         uint64_t checksum);

// A frame's header checked against the file it starts (magic, version, the payload length
// against `file_bytes`): the payload's length and checksum, or what is wrong, naming `what`.
// `head` holds at least the file's first frame_header_bytes bytes when the file has them.
struct frame_fields {
  uint64_t length = 0;
  uint64_t checksum = 0;
};
result<frame_fields> check_frame_header(byte_view head, uint64_t file_bytes,
                                        const std::array<char, 4>& magic, uint32_t version,
                                        const std::string& what);

// Checks the frame and returns a view of its payload (into `file`). `what` names the file in
// errors (usually its path).
result<byte_view> open_frame(byte_view file, const std::array<char, 4>& magic, uint32_t version,
                             const std::string& what);

}  // namespace diloco
