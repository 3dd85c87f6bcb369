// Files that survive crashes: written whole to a temporary name, fsynced, renamed over the
// target (atomic on POSIX), and the directory fsynced, so a reader sees the old file or the
// new one, never half of one. Nothing is ever overwritten in place.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/held_bytes.hpp"
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

// The first `size` bytes of the open file `fd` (`path` names it in errors), read-only and
// shared: mapped where the file system allows it, so that the bytes are the page cache's pages
// (no copy into memory of our own, nothing zeroed first, nothing counted in the process's
// private memory), all mapped at once; read into a buffer of their own, not zeroed first, where
// it does not. A mapped file must keep its size while the bytes are held: our files are
// never written over (a reader of a page past a shortened end would get SIGBUS).
result<held_bytes> map_file(int fd, uint64_t size, const std::string& path);
// Whether map_file maps (the default) or always reads, as it does where mapping fails: the
// tests and bench/resume_traffic.sh choose reading to run that path and to count what it moves
// (a heap profiler sees the bytes read into memory of our own, not a mapping's). Process-wide.
void set_file_mapping(bool on);
// A whole file as map_file gives it (model files, safetensors files, tapes: read once, parsed
// from where they lie). Missing files are not_found; unreadable ones io_error.
result<held_bytes> map_whole_file(const std::string& path);

}  // namespace diloco
