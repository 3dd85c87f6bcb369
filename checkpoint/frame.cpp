#include "checkpoint/frame.hpp"

#include <cstring>

#include "base/check.hpp"
#include "base/checksum.hpp"

namespace diloco {

std::array<uint8_t, frame_header_bytes> make_frame_header(const std::array<char, 4>& magic,
                                                          uint32_t version, uint64_t length,
                                                          uint64_t checksum) {
  std::array<uint8_t, frame_header_bytes> h{};
  std::memcpy(h.data(), magic.data(), 4);
  std::memcpy(h.data() + 4, &version, 4);
  std::memcpy(h.data() + 8, &length, 8);
  std::memcpy(h.data() + 16, &checksum, 8);
  return h;
}

std::vector<uint8_t> make_frame(const std::array<char, 4>& magic, uint32_t version,
                                byte_view payload) {
  std::vector<uint8_t> out(frame_header_bytes + payload.size());
  const auto h =
      make_frame_header(magic, version, payload.size(), checksum64(payload.data(), payload.size()));
  std::memcpy(out.data(), h.data(), h.size());
  if (!payload.empty())
    std::memcpy(out.data() + frame_header_bytes, payload.data(), payload.size());
  return out;
}

result<frame_fields> check_frame_header(byte_view head, uint64_t file_bytes,
                                        const std::array<char, 4>& magic, uint32_t version,
                                        const std::string& what) {
  auto corrupt = [&](const std::string& problem) {
    return status(errc::corrupt_data, what + ": " + problem);
  };
  if (file_bytes < frame_header_bytes || head.size() < frame_header_bytes) {
    return corrupt("truncated (" + std::to_string(file_bytes) + " bytes, the header alone is " +
                   std::to_string(frame_header_bytes) + ")");
  }
  if (std::memcmp(head.data(), magic.data(), 4) != 0) {
    return corrupt("not a " + std::string(magic.data(), 4) + " file (wrong magic)");
  }
  uint32_t v = 0;
  frame_fields f;
  std::memcpy(&v, head.data() + 4, 4);
  std::memcpy(&f.length, head.data() + 8, 8);
  std::memcpy(&f.checksum, head.data() + 16, 8);
  if (v != version) {
    return corrupt("format version " + std::to_string(v) + ", this build reads version " +
                   std::to_string(version));
  }
  if (f.length != file_bytes - frame_header_bytes) {
    return corrupt(
        std::string(f.length > file_bytes - frame_header_bytes ? "truncated" : "trailing bytes") +
        ": header says " + std::to_string(f.length) + " payload bytes, file has " +
        std::to_string(file_bytes - frame_header_bytes));
  }
  return f;
}

result<byte_view> open_frame(byte_view file, const std::array<char, 4>& magic, uint32_t version,
                             const std::string& what) {
  auto f = check_frame_header(file, file.size(), magic, version, what);
  if (!f) return f.error();
  const byte_view payload = file.subspan(frame_header_bytes, f->length);
  DILOCO_CHECK(payload.size() + frame_header_bytes == file.size(),
               "open_frame: the payload is the whole file after its header");
  if (checksum64(payload.data(), payload.size()) != f->checksum)
    return status(errc::corrupt_data, what + ": checksum mismatch (the file is corrupted)");
  return payload;
}

}  // namespace diloco
