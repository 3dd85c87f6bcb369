// Codecs for outer gradients: the compact byte blobs that travel between learners and syncers.
//
// Blob format (little-endian, documented in docs/formats.md):
//   0  magic "DLCB"      4  version u8 (1)   5  codec u8   6  reserved u16 (0)
//   8  count u64 (values encoded)   16  param u32 (block size, or k for top-k)
//   20 flags u32 (bit 0: error feedback)   24  checksum u64 = XXH3(payload, seed XXH3(bytes 0..24))
//   32 payload, whose exact size follows from (codec, count, param)
//
// Decoding validates every field, the checksum and the finiteness of the values: a truncated,
// mismatched, corrupted or non-finite blob is an error value, never a crash or a silent wrong
// tensor. With error feedback the encoder
// keeps the residual e: p = d + e, send c = C(p), keep e = p - decode(c).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/span.hpp"
#include "base/status.hpp"

namespace diloco {

enum class codec_kind : uint8_t {
  fp32 = 0,
  bf16 = 1,
  int8 = 2,   // blockwise absmax, levels -127..127
  int4 = 3,   // blockwise absmax, levels -7..7, two per byte
  int2 = 4,   // 2 bits, four levels +-0.4528 and +-1.510 times the block's RMS (Lloyd-Max)
  sign1 = 5,  // sign bit per value, one scale (mean |x|) per block
  topk = 6,   // the k largest |x| as (u32 index, f32 value) pairs
  fp4 = 7,    // FP4 E2M1 (+-0, 0.5, 1, 1.5, 2, 3, 4, 6) times the block's absmax / 6
};
constexpr int codec_kind_count = 8;

const char* to_string(codec_kind k);
result<codec_kind> parse_codec_kind(const std::string& text);

struct codec_config {
  codec_kind kind = codec_kind::fp32;
  int block = 256;              // values per scale for int8/int4/int2/fp4/sign1
  double topk_fraction = 0.01;  // share of values kept by top-k
  // Error feedback; on by default for the codecs whose error is biased or large (sign1, top-k,
  // int2): without it their bias accumulates.
  bool error_feedback = false;

  static codec_config make(codec_kind kind);
  status validate() const;
};

constexpr size_t blob_header_bytes = 32;

struct blob_header {
  codec_kind kind = codec_kind::fp32;
  uint64_t count = 0;
  uint32_t param = 0;
  uint32_t flags = 0;
  uint64_t checksum = 0;
};

// Exact size of the blob for `count` values.
size_t encoded_bytes(const codec_config& config, size_t count);
// 4 * count / encoded_bytes: what a codec should achieve on a large fragment.
double expected_compression_ratio(const codec_config& config, size_t count);

// Encodes values into out (resized). With error feedback `residual` (same size) is read and
// updated; otherwise it is ignored and may be empty. When `decoded` is given (same size) it
// receives exactly, bit for bit, what decode(out) will produce, without decoding.
// Non-finite input is refused: a non_finite error naming the first bad value's index, with
// `out` and `residual` unspecified (the caller's numerics are broken; it must not send).
status encode(const codec_config& config, cfspan values, fspan residual, std::vector<uint8_t>& out,
              fspan decoded = fspan());

// Error feedback with the new values already added in: `residual` holds p = d + e on entry;
// encodes p and leaves p - decode(c) in `residual`. Saves the caller a pass when it can form
// d + e in the loop that computes d. Requires config.error_feedback. Refuses non-finite input
// as encode does.
status encode_accumulated(const codec_config& config, fspan residual, std::vector<uint8_t>& out,
                          fspan decoded = fspan());

// encode() without the finiteness check, for tests that forge what a faulty or hostile peer
// could send. Nothing else may call it.
void encode_unchecked_for_tests(const codec_config& config, cfspan values,
                                std::vector<uint8_t>& out);

// The index of the first NaN or Inf in `values`, or values.size() when all are finite.
size_t first_non_finite(cfspan values);

// Reads and validates the header alone (magic, version, codec, sizes; not the checksum).
result<blob_header> read_header(byte_view blob);

// Validates the whole blob and writes its values to out; out.size() must be the blob's count.
// The values written are all finite, or the result is a non_finite error: a blob carrying NaN
// or Inf (a diverged or hostile peer) never reaches a merge. `out` is undefined on error.
status decode(byte_view blob, fspan out);

// The same checks, then out += the decoded values. On any error `out` is left untouched.
status decode_add(byte_view blob, fspan out);

}  // namespace diloco
