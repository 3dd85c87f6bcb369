// Files that survive crashes: written whole to a temporary name, fsynced, renamed over the
// target (atomic on POSIX), and the directory fsynced, so a reader sees the old file or the
// new one, never half of one. Nothing is ever overwritten in place.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/span.hpp"
#include "base/status.hpp"

namespace diloco {

// Writes `bytes` to `path` atomically (see above). Errors name the path and the OS reason.
status write_file_atomic(const std::string& path, byte_view bytes);
// The same for a file made of several pieces, written in order without joining them first (a
// header and a model's parameters: no second copy of the model in memory).
status write_file_atomic(const std::string& path, const std::vector<byte_view>& pieces);

// A frame (checkpoint/frame.hpp) whose payload comes in pieces, written atomically as above,
// reading each payload byte once: every chunk is checksummed as it is written, and the header,
// which holds the checksum, goes in last at the front. Returns the payload's checksum.
result<uint64_t> write_frame_atomic(const std::string& path, const std::array<char, 4>& magic,
                                    uint32_t version, const std::vector<byte_view>& payload);

// Reads a whole file. Missing files are not_found; unreadable ones io_error.
result<std::vector<uint8_t>> read_file(const std::string& path);

}  // namespace diloco
