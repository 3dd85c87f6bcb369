#include "tensor/codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "base/check.hpp"
#include "base/checksum.hpp"

namespace diloco {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "blobs are little-endian on the wire");

namespace {

constexpr char blob_magic[4] = {'D', 'L', 'C', 'B'};
constexpr uint8_t blob_version = 1;
constexpr uint64_t count_max = uint64_t{1} << 36;
constexpr uint32_t block_max = 1u << 20;

int quant_bits(codec_kind k) {  // bits per value of the blockwise integer codecs
  switch (k) {
    case codec_kind::int8:
      return 8;
    case codec_kind::int4:
      return 4;
    default:
      return 0;
  }
}

// The codes that are a sign and a magnitude from a table, times a per-block scale.
int level_bits(codec_kind k) {
  return k == codec_kind::fp4 ? 4 : k == codec_kind::int2 ? 2 : 0;
}

bool blockwise(codec_kind k) {
  return quant_bits(k) > 0 || level_bits(k) > 0 || k == codec_kind::sign1;
}

uint64_t ceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

uint64_t topk_count(double fraction, uint64_t count) {
  if (count == 0) return 0;
  const auto k = static_cast<uint64_t>(std::llround(fraction * static_cast<double>(count)));
  return std::clamp<uint64_t>(k, 1, count);
}

// Payload bytes for (kind, count, param); param is the block size or k.
uint64_t payload_bytes(codec_kind kind, uint64_t count, uint64_t param) {
  switch (kind) {
    case codec_kind::fp32:
      return count * 4;
    case codec_kind::bf16:
      return count * 2;
    case codec_kind::int8:
    case codec_kind::int4:
      return ceil_div(count, param) * 4 + ceil_div(count * quant_bits(kind), 8);
    case codec_kind::int2:
    case codec_kind::fp4:
      return ceil_div(count, param) * 4 + ceil_div(count * level_bits(kind), 8);
    case codec_kind::sign1:
      return ceil_div(count, param) * 4 + ceil_div(count, 8);
    case codec_kind::topk:
      return param * 8;
  }
  return 0;
}

template <class T>
void put(uint8_t* at, T v) {
  std::memcpy(at, &v, sizeof v);
}
template <class T>
T get(const uint8_t* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

uint16_t to_bf16(float x) {
  uint32_t u = get<uint32_t>(reinterpret_cast<const uint8_t*>(&x));
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                    // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// ---- kernels: p -> payload; when residual is non-null it receives p - decode(payload) --------
// The fp32 kernels live in encode()/decode(), fused with the checksum.

void bf16_encode(const float* p, size_t n, uint8_t* out, float* residual, float* decoded) {
  auto* h = reinterpret_cast<uint16_t*>(out);
  for (size_t i = 0; i < n; ++i) {
    const float x = p[i];
    h[i] = to_bf16(x);
    const float recon = from_bf16(h[i]);
    if (residual != nullptr) residual[i] = x - recon;
    if (decoded != nullptr) decoded[i] = recon;
  }
}

// Returns false when some value is NaN or Inf (exponent bits all set).
bool bf16_finite(const uint8_t* in, size_t n) {
  unsigned bad = 0;
  for (size_t i = 0; i < n; ++i) bad |= (get<uint16_t>(in + 2 * i) & 0x7f80u) == 0x7f80u ? 1u : 0u;
  return bad == 0;
}

// ADD: out += decoded, else out = decoded (decode_add and decode share every kernel).
template <bool ADD>
inline void store(float& o, float v) {
  if constexpr (ADD) {
    o += v;
  } else {
    o = v;
  }
}

template <bool ADD>
void bf16_decode(const uint8_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) store<ADD>(out[i], from_bf16(get<uint16_t>(in + 2 * i)));
}

// True when every value is finite.
bool all_finite(const float* x, size_t n) {
  return first_non_finite(cfspan(x, n)) == n;
}

// The block scales of the blockwise codecs: >= 0 (as an encoder makes them), and small enough
// that the largest level a code can hold times the scale, computed as decode computes it, is a
// finite float. A finite scale alone is not enough: 3e38 x 7 is Inf.
bool scales_valid(const uint8_t* in, size_t blocks, float top_level) {
  for (size_t b = 0; b < blocks; ++b) {
    const float s = get<float>(in + b * 4);
    if (!(s >= 0.0f) || !std::isfinite(s * top_level)) return false;
  }
  return true;
}

// max |x| over n values, in 16 lanes so the compiler vectorizes it.
float abs_max(const float* x, size_t n) {
  float lane[16] = {};
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    for (int k = 0; k < 16; ++k) lane[k] = std::max(lane[k], std::fabs(x[j + k]));
  }
  float m = 0.0f;
  for (; j < n; ++j) m = std::max(m, std::fabs(x[j]));
  for (float v : lane) m = std::max(m, v);
  return m;
}

// sum |x| over n values, 16 float lanes (a block is small enough for float sums).
float abs_sum(const float* x, size_t n) {
  float lane[16] = {};
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    for (int k = 0; k < 16; ++k) lane[k] += std::fabs(x[j + k]);
  }
  float s = 0.0f;
  for (; j < n; ++j) s += std::fabs(x[j]);
  for (float v : lane) s += v;
  return s;
}

// Writes the codes of values [base, base + m) into the packed array (zeroed beforehand).
constexpr size_t code_chunk = 256;  // values an encoder codes at a time

// Aligned runs go a word at a time: the per_byte codes of one output byte, read as one
// little-endian word w (code k in bits 8k..8k+BITS-1), come together as the low byte of
// w | w >> (8 - BITS) | w >> 2(8 - BITS) | ... (each code is below 2^BITS, so nothing else
// reaches the low byte): a loop of shifts and ors the compiler vectorizes.
template <int BITS>
void pack_codes(uint8_t* codes, size_t base, const uint8_t* q, size_t m) {
  constexpr size_t per_byte = 8 / BITS;
  using word = std::conditional_t<per_byte == 2, uint16_t,
                                  std::conditional_t<per_byte == 4, uint32_t, uint64_t>>;
  static_assert(sizeof(word) == per_byte, "codec: one word per output byte");
  size_t j = 0;
  if (base % per_byte == 0) {
    const size_t whole = m / per_byte;
    word w[code_chunk];
    std::memcpy(w, q, whole * per_byte);
    uint8_t* out = codes + base / per_byte;
    for (size_t i = 0; i < whole; ++i) {
      word v = w[i];
      for (size_t k = 1; k < per_byte; ++k) v |= static_cast<word>(w[i] >> ((8 - BITS) * k));
      out[i] = static_cast<uint8_t>(v);
    }
    j = whole * per_byte;
  }
  for (; j < m; ++j) {
    const size_t i = base + j;
    codes[i / per_byte] |= static_cast<uint8_t>(q[j] << (BITS * (i % per_byte)));
  }
}

// The frame of every blockwise encoder: per block, `scale_of(x, len)` gives {scale, inverse}
// (the scale goes into the payload), then per chunk of at most 256 values `code(x, m, scale,
// q, recon)` gives each value's BITS-bit code in q and what decode will compute for it in
// recon, which fills `residual` (x - recon) and `decoded` when given. Codes are packed low bits
// first after the scales. Each step is a plain loop over the chunk, so the compiler vectorizes
// it (a loop over values doing all of it at once did not vectorize: about 2.5 GB/s for int4).
struct block_scale {
  float scale = 0.0f;
  float inverse = 0.0f;
};
template <int BITS, class ScaleOf, class Code>
void encode_blocks(const float* p, size_t n, size_t block, uint8_t* out, float* residual,
                   float* decoded, ScaleOf scale_of, Code code) {
  const size_t blocks = ceil_div(n, block);
  uint8_t* codes = out + blocks * 4;
  if (BITS < 8) std::memset(codes, 0, ceil_div(n * BITS, 8));
  alignas(64) uint8_t q[code_chunk];
  alignas(64) float recon[code_chunk];
  for (size_t blk = 0; blk < blocks; ++blk) {
    const size_t b0 = blk * block, len = std::min(block, n - b0);
    const block_scale s = scale_of(p + b0, len);
    put<float>(out + blk * 4, s.scale);
    for (size_t j0 = 0; j0 < len; j0 += code_chunk) {
      const size_t m = std::min<size_t>(code_chunk, len - j0);
      const float* x = p + b0 + j0;
      code(x, m, s, q, recon);
      if (residual != nullptr) {
        float* r = residual + b0 + j0;
        for (size_t j = 0; j < m; ++j) r[j] = x[j] - recon[j];
      }
      if (decoded != nullptr) std::memcpy(decoded + b0 + j0, recon, m * sizeof(float));
      if constexpr (BITS == 8) {
        std::memcpy(codes + b0 + j0, q, m);
      } else {
        pack_codes<BITS>(codes, b0 + j0, q, m);
      }
    }
  }
}

// rint(v) for |v| <= 2^22 in the default rounding mode (to nearest, ties to even), in a form
// the compiler vectorizes (it does not vectorize rint itself while floating-point exceptions
// are honoured): adding 1.5 * 2^23 leaves no fraction bits, so the addition rounds v to an
// integer; the subtraction is exact. The build does not contract or reassociate (-ffp-contract=off,
// no -ffast-math), so this stays two roundings of which the second is exact.
inline float round_even(float v) {
  constexpr float magic = 12582912.0f;  // 1.5 * 2^23
  return (v + magic) - magic;
}

// Blockwise absmax: per block scale = absmax / Q, code u = rint(x / scale) + Q in BITS bits.
template <int BITS>
void intn_encode(const float* p, size_t n, size_t block, uint8_t* out, float* residual,
                 float* decoded) {
  constexpr int Q = (1 << (BITS - 1)) - 1;
  encode_blocks<BITS>(
      p, n, block, out, residual, decoded,
      [](const float* x, size_t len) {
        constexpr float qf = static_cast<float>(Q);
        const float absmax = abs_max(x, len);
        return block_scale{absmax / qf, absmax > 0.0f ? qf / absmax : 0.0f};
      },
      [](const float* x, size_t m, const block_scale& s, uint8_t* q, float* recon) {
        constexpr float qf = static_cast<float>(Q);
        alignas(64) float c[code_chunk];
        for (size_t j = 0; j < m; ++j) {
          // Clamped to the code range after rounding, as rint then clamp did: round_even equals
          // rint below 2^22, and above it keeps the sign and a magnitude the clamp takes to Q
          // (|x / scale| is at most Q here anyway); NaN stays NaN. + 0.0f: rounding gives -0
          // for small negatives; decode's (u - Q) gives +0. (A select feeding arithmetic stops
          // the compiler vectorizing the loop, so the clamp comes last.)
          const float r = round_even(x[j] * s.inverse) + 0.0f;
          c[j] = std::min(std::max(r, -qf), qf);
        }
        // c * scale is exactly what decode computes, (u - Q) * scale with u - Q == c.
        for (size_t j = 0; j < m; ++j) recon[j] = c[j] * s.scale;
        for (size_t j = 0; j < m; ++j) q[j] = static_cast<uint8_t>(static_cast<int>(c[j]) + Q);
      });
}

template <int BITS, bool ADD>
void intn_decode(const uint8_t* in, size_t n, size_t block, float* out) {
  constexpr int Q = (1 << (BITS - 1)) - 1;
  constexpr size_t per_byte = 8 / BITS;
  constexpr unsigned mask = (1u << BITS) - 1u;
  const size_t blocks = ceil_div(n, block);
  const uint8_t* codes = in + blocks * 4;
  for (size_t blk = 0; blk < blocks; ++blk) {
    const size_t b0 = blk * block, len = std::min(block, n - b0);
    const float scale = get<float>(in + blk * 4);
    float* o = out + b0;
    size_t j = 0;
    if (b0 % per_byte == 0) {
      const uint8_t* c = codes + b0 / per_byte;
      for (; j + per_byte <= len; j += per_byte) {
        const unsigned byte = c[j / per_byte];
        for (size_t k = 0; k < per_byte; ++k) {
          store<ADD>(o[j + k],
                     static_cast<float>(static_cast<int>((byte >> (BITS * k)) & mask) - Q) * scale);
        }
      }
    }
    for (; j < len; ++j) {
      const size_t i = b0 + j;
      const unsigned u = (codes[i / per_byte] >> (BITS * (i % per_byte))) & mask;
      store<ADD>(o[j], static_cast<float>(static_cast<int>(u) - Q) * scale);
    }
  }
}

// Sign-and-magnitude codes: value = (sign ? -1 : 1) * magnitude[m] * scale, code = sign << (B-1)
// | m, one fp32 scale per block. Encoding picks the nearest magnitude (the thresholds are the
// midpoints between neighbours).
//
// FP4 E2M1: the eight non-negative values of a 4-bit float with 2 exponent and 1 mantissa bits,
// scaled so that the block's largest |x| is 6 (the top value): the element format of the
// published FP4 runs, with an fp32 scale per block where MX formats use a power of two.
struct fp4_levels {
  static constexpr int bits = 4;
  static constexpr int count = 8;
  static constexpr float magnitude[count] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  static constexpr float midpoint[count - 1] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  static float scale(const float* x, size_t n) { return abs_max(x, n) / 6.0f; }
};
// 2 bits, four levels: the Lloyd-Max quantizer of a Gaussian (+-0.4528 and +-1.510 standard
// deviations, boundary 0.9816), scaled by the block's RMS. An absmax-scaled code with a level at
// zero (the ternary {-a, 0, a} this replaced) sends most of a block as 0, so its error is most
// of the block: error feedback then carries much of every delta into the next one and releases
// it in bursts (docs/architecture.md, "Where the implementation differs ...").
struct int2_levels {
  static constexpr int bits = 2;
  static constexpr int count = 2;
  static constexpr float magnitude[count] = {0.4528f, 1.5104f};
  static constexpr float midpoint[count - 1] = {0.9816f};
  static float scale(const float* x, size_t n) {
    float lane[16] = {};
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
      for (int k = 0; k < 16; ++k) lane[k] += x[j + k] * x[j + k];
    }
    float s = 0.0f;
    for (; j < n; ++j) s += x[j] * x[j];
    for (float v : lane) s += v;
    return n == 0 ? 0.0f : std::sqrt(s / static_cast<float>(n));
  }
};

template <class L>
void level_encode(const float* p, size_t n, size_t block, uint8_t* out, float* residual,
                  float* decoded) {
  encode_blocks<L::bits>(
      p, n, block, out, residual, decoded,
      [](const float* x, size_t len) {
        const float scale = L::scale(x, len);
        return block_scale{scale, scale > 0.0f ? 1.0f / scale : 0.0f};
      },
      [](const float* x, size_t m, const block_scale& s, uint8_t* q, float* recon) {
        // In steps the compiler vectorizes (a select feeding arithmetic in one loop stops it):
        // the nearest magnitude's index (the midpoints below |x| / scale, counted), its signed
        // value, then what decode computes from it, to the bit, and the code.
        alignas(64) int32_t index[code_chunk];
        alignas(64) float value[code_chunk];
        size_t j0 = 0;
#if defined(__AVX2__)
        // Eight levels: the value is a lookup of the index in one permute, where the compiler
        // would blend seven times. The same operations on the same values: the same bits.
        if constexpr (L::count == 8) {
          const __m256 table = _mm256_loadu_ps(L::magnitude);
          const __m256 inverse = _mm256_set1_ps(s.inverse), scale = _mm256_set1_ps(s.scale);
          const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
          const __m256 sign_bit = _mm256_set1_ps(-0.0f);
          const __m256i sign_code = _mm256_set1_epi32(1 << (L::bits - 1));
          for (; j0 + 8 <= m; j0 += 8) {
            const __m256 v = _mm256_loadu_ps(x + j0);
            const __m256 y = _mm256_mul_ps(_mm256_and_ps(v, abs_mask), inverse);
            __m256i k = _mm256_setzero_si256();
            for (int t = 0; t < L::count - 1; ++t) {  // all ones (-1) where above
              const __m256 above = _mm256_cmp_ps(y, _mm256_set1_ps(L::midpoint[t]), _CMP_GT_OQ);
              k = _mm256_sub_epi32(k, _mm256_castps_si256(above));
            }
            const __m256 negative = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ);
            const __m256 level = _mm256_xor_ps(_mm256_permutevar8x32_ps(table, k),
                                               _mm256_and_ps(negative, sign_bit));
            _mm256_storeu_ps(recon + j0, _mm256_mul_ps(level, scale));
            _mm256_store_si256(
                reinterpret_cast<__m256i*>(index + j0),
                _mm256_or_si256(k, _mm256_and_si256(_mm256_castps_si256(negative), sign_code)));
          }
          for (size_t j = 0; j < j0; ++j) q[j] = static_cast<uint8_t>(index[j]);
        }
#endif
        for (size_t j = j0; j < m; ++j) {
          const float y = std::fabs(x[j]) * s.inverse;
          int32_t k = 0;
          float v = L::magnitude[0];
          for (int t = 0; t < L::count - 1; ++t) {
            const bool above = y > L::midpoint[t];
            k += static_cast<int32_t>(above);
            v = above ? L::magnitude[t + 1] : v;  // the midpoints rise: the last one below y
          }
          index[j] = k;
          value[j] = v;
        }
        for (size_t j = j0; j < m; ++j) value[j] = x[j] < 0.0f ? -value[j] : value[j];
        for (size_t j = j0; j < m; ++j) recon[j] = value[j] * s.scale;
        for (size_t j = j0; j < m; ++j) {
          q[j] = static_cast<uint8_t>(index[j] | (x[j] < 0.0f ? 1 << (L::bits - 1) : 0));
        }
      });
}

template <class L, bool ADD>
void level_decode(const uint8_t* in, size_t n, size_t block, float* out) {
  constexpr size_t per_byte = 8 / L::bits;
  constexpr unsigned mask = (1u << L::bits) - 1u;
  // Every code's value relative to the scale: magnitudes, then their negatives.
  float value[1u << L::bits];
  for (int m = 0; m < L::count; ++m) {
    value[m] = L::magnitude[m];
    value[m + L::count] = -L::magnitude[m];
  }
  const size_t blocks = ceil_div(n, block);
  const uint8_t* codes = in + blocks * 4;
  for (size_t blk = 0; blk < blocks; ++blk) {
    const size_t b0 = blk * block, len = std::min(block, n - b0);
    const float scale = get<float>(in + blk * 4);
    float* o = out + b0;
    for (size_t j = 0; j < len; ++j) {
      const size_t i = b0 + j;
      const unsigned u = (codes[i / per_byte] >> (L::bits * (i % per_byte))) & mask;
      store<ADD>(o[j], value[u] * scale);
    }
  }
}

// Sign with one magnitude per block: mean |x| minimizes the block's squared error.
void sign1_encode(const float* p, size_t n, size_t block, uint8_t* out, float* residual,
                  float* decoded) {
  encode_blocks<1>(
      p, n, block, out, residual, decoded,
      [](const float* x, size_t len) {
        return block_scale{abs_sum(x, len) / static_cast<float>(len), 0.0f};
      },
      [](const float* x, size_t m, const block_scale& s, uint8_t* q, float* recon) {
        for (size_t j = 0; j < m; ++j) recon[j] = x[j] >= 0.0f ? s.scale : -s.scale;
        for (size_t j = 0; j < m; ++j) q[j] = x[j] >= 0.0f ? 1 : 0;
      });
}

template <bool ADD>
void sign1_decode(const uint8_t* in, size_t n, size_t block, float* out) {
  const size_t blocks = ceil_div(n, block);
  const uint8_t* bits = in + blocks * 4;
  for (size_t blk = 0; blk < blocks; ++blk) {
    const size_t b0 = blk * block, len = std::min(block, n - b0);
    const float scale = get<float>(in + blk * 4);
    const float values[2] = {-scale, scale};
    float* o = out + b0;
    size_t j = 0;
    if (b0 % 8 == 0) {
      for (; j + 8 <= len; j += 8) {
        const unsigned byte = bits[(b0 + j) / 8];
        for (unsigned k = 0; k < 8; ++k) store<ADD>(o[j + k], values[(byte >> k) & 1u]);
      }
    }
    for (; j < len; ++j) {
      const size_t i = b0 + j;
      store<ADD>(o[j], values[(bits[i / 8] >> (i % 8)) & 1u]);
    }
  }
}

// Order-preserving key of |x|: for non-negative floats the bit pattern sorts like the value.
// NaN maps to the top so a broken gradient is sent, not hidden.
uint32_t magnitude_key(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u &= 0x7fffffffu;
  return u > 0x7f800000u ? 0xffffffffu : u;
}

// The k-th largest key (1-based k) by radix select: 11 + 11 + 10 bits, one histogram each.
uint32_t kth_largest_key(const float* p, size_t n, size_t k) {
  uint32_t prefix = 0, prefix_mask = 0;
  size_t remaining = k;  // rank still to find within the current prefix
  const int widths[3] = {11, 11, 10};
  int shift = 32;
  for (int w : widths) {
    shift -= w;
    const uint32_t buckets = 1u << w;
    std::vector<size_t> hist(buckets, 0);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t key = magnitude_key(p[i]);
      if ((key & prefix_mask) == prefix) hist[(key >> shift) & (buckets - 1)]++;
    }
    uint32_t b = buckets;
    while (b-- > 0) {  // from the largest bucket down
      if (hist[b] >= remaining) break;
      remaining -= hist[b];
    }
    prefix |= b << shift;
    prefix_mask |= (buckets - 1) << shift;
  }
  return prefix;
}

// Top-k by magnitude, ties broken toward the lower index; indices come out ascending.
void topk_encode(const float* p, size_t n, size_t k, uint8_t* out, float* residual,
                 float* decoded) {
  uint8_t* values = out + k * 4;
  if (residual != nullptr) std::memcpy(residual, p, n * 4);
  if (decoded != nullptr) std::fill(decoded, decoded + n, 0.0f);
  if (k == 0) return;
  const uint32_t threshold = kth_largest_key(p, n, k);
  size_t above = 0;
  for (size_t i = 0; i < n; ++i) above += magnitude_key(p[i]) > threshold ? 1 : 0;
  size_t ties_left = k - above;
  size_t j = 0;
  for (size_t i = 0; i < n && j < k; ++i) {
    const uint32_t key = magnitude_key(p[i]);
    if (key > threshold || (key == threshold && ties_left > 0)) {
      if (key == threshold) --ties_left;
      put<uint32_t>(out + j * 4, static_cast<uint32_t>(i));
      put<float>(values + j * 4, p[i]);
      if (decoded != nullptr) decoded[i] = p[i];
      if (residual != nullptr) residual[i] = 0.0f;
      ++j;
    }
  }
  DILOCO_CHECK(j == k, "codec: top-k kept exactly k values");
}

// Validates indices (strictly increasing, < n) and values (finite) before writing anything.
status topk_check(const uint8_t* in, size_t n, size_t k) {
  const uint8_t* values = in + k * 4;
  int64_t previous = -1;
  for (size_t j = 0; j < k; ++j) {
    const uint32_t i = get<uint32_t>(in + j * 4);
    if (static_cast<int64_t>(i) <= previous || i >= n) {
      return status(errc::corrupt_data, "top-k blob: index " + std::to_string(j) + " (" +
                                            std::to_string(i) +
                                            ") is out of order or out of range");
    }
    previous = i;
    if (!std::isfinite(get<float>(values + j * 4))) {
      return status(errc::non_finite, "top-k blob: value " + std::to_string(j) + " is NaN or Inf");
    }
  }
  return {};
}

template <bool ADD>
void topk_decode(const uint8_t* in, size_t n, size_t k, float* out) {
  if constexpr (!ADD) std::fill(out, out + n, 0.0f);
  const uint8_t* values = in + k * 4;
  for (size_t j = 0; j < k; ++j)
    store<ADD>(out[get<uint32_t>(in + j * 4)], get<float>(values + j * 4));
}

uint32_t header_param(const codec_config& c, size_t count) {
  if (c.kind == codec_kind::topk) return static_cast<uint32_t>(topk_count(c.topk_fraction, count));
  return blockwise(c.kind) ? static_cast<uint32_t>(c.block) : 0u;
}

}  // namespace

const char* to_string(codec_kind k) {
  switch (k) {
    case codec_kind::fp32:
      return "fp32";
    case codec_kind::bf16:
      return "bf16";
    case codec_kind::int8:
      return "int8";
    case codec_kind::int4:
      return "int4";
    case codec_kind::int2:
      return "int2";
    case codec_kind::sign1:
      return "sign1";
    case codec_kind::topk:
      return "topk";
    case codec_kind::fp4:
      return "fp4";
  }
  return "?";
}

result<codec_kind> parse_codec_kind(const std::string& text) {
  for (int i = 0; i < codec_kind_count; ++i) {
    const auto k = static_cast<codec_kind>(i);
    if (text == to_string(k)) return k;
  }
  return status(
      errc::invalid_argument,
      "codec '" + text + "': expected one of fp32, bf16, int8, int4, fp4, int2, sign1, topk");
}

codec_config codec_config::make(codec_kind kind) {
  codec_config c;
  c.kind = kind;
  c.error_feedback =
      kind == codec_kind::sign1 || kind == codec_kind::topk || kind == codec_kind::int2;
  return c;
}

status codec_config::validate() const {
  if (block < 1 || static_cast<uint32_t>(block) > block_max) {
    return status(errc::invalid_argument, "codec.block: must be in [1, 1048576]");
  }
  if (!(topk_fraction > 0 && topk_fraction <= 1)) {
    return status(errc::invalid_argument, "codec.topk_fraction: must be in (0, 1]");
  }
  return {};
}

size_t encoded_bytes(const codec_config& config, size_t count) {
  return blob_header_bytes + payload_bytes(config.kind, count, header_param(config, count));
}

double expected_compression_ratio(const codec_config& config, size_t count) {
  return 4.0 * static_cast<double>(count) / static_cast<double>(encoded_bytes(config, count));
}

namespace {
void encode_impl(const codec_config& config, const float* p, float* res, size_t n,
                 std::vector<uint8_t>& out, fspan decoded);
}  // namespace

size_t first_non_finite(cfspan values) {
  const float* p = values.data();
  const size_t n = values.size();
  // A float is NaN or Inf when its exponent bits are all ones: an integer test that
  // vectorizes, checked per block; the index is looked for only in a bad block.
  constexpr size_t block = 1024;
  constexpr uint32_t exponent = 0x7f800000u;
  for (size_t at = 0; at < n; at += block) {
    const size_t end = std::min(n, at + block);
    uint32_t bad = 0;
    for (size_t i = at; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, p + i, 4);
      bad |= static_cast<uint32_t>((bits & exponent) == exponent);
    }
    if (bad != 0) {
      for (size_t i = at; i < end; ++i)
        if (!std::isfinite(p[i])) return i;
    }
  }
  return n;
}

namespace {
status non_finite_at(cfspan values, size_t i) {
  return status(errc::non_finite, "value " + std::to_string(i) + " of " +
                                      std::to_string(values.size()) + " is " +
                                      (std::isnan(values[i]) ? "NaN" : "Inf"));
}
}  // namespace

status encode(const codec_config& config, cfspan values, fspan residual, std::vector<uint8_t>& out,
              fspan decoded) {
  DILOCO_CHECK(config.validate().ok(), "codec: a validated configuration");
  if (!config.error_feedback) {
    if (const size_t bad = first_non_finite(values); bad != values.size())
      return non_finite_at(values, bad);
    encode_impl(config, values.data(), nullptr, values.size(), out, decoded);
    return ok_status();
  }
  DILOCO_CHECK(residual.size() == values.size(), "codec: an error-feedback residual per value");
  // p = d + e lives in the residual buffer; each kernel overwrites it with p - decode(c).
  for (size_t i = 0; i < values.size(); ++i) residual[i] += values[i];
  return encode_accumulated(config, residual, out, decoded);
}

status encode_accumulated(const codec_config& config, fspan residual, std::vector<uint8_t>& out,
                          fspan decoded) {
  DILOCO_CHECK(config.validate().ok() && config.error_feedback,
               "codec: a validated configuration with error feedback");
  const cfspan p(residual.data(), residual.size());
  if (const size_t bad = first_non_finite(p); bad != p.size()) return non_finite_at(p, bad);
  encode_impl(config, residual.data(), residual.data(), residual.size(), out, decoded);
  return ok_status();
}

void encode_unchecked_for_tests(const codec_config& config, cfspan values,
                                std::vector<uint8_t>& out) {
  DILOCO_CHECK(!config.error_feedback, "codec: the unchecked encoder has no residual");
  encode_impl(config, values.data(), nullptr, values.size(), out, fspan());
}

namespace {

void encode_impl(const codec_config& config, const float* p, float* res, size_t n,
                 std::vector<uint8_t>& out, fspan decoded) {
  DILOCO_CHECK(n <= count_max, "codec: a blob holds at most count_max values");
  DILOCO_CHECK(config.kind != codec_kind::topk || n <= UINT32_MAX,
               "codec: top-k indices fit 32 bits");
  const uint32_t param = header_param(config, n);
  out.resize(blob_header_bytes + payload_bytes(config.kind, n, param));
  uint8_t* payload = out.data() + blob_header_bytes;

  uint8_t* h = out.data();
  std::memcpy(h, blob_magic, 4);
  h[4] = blob_version;
  h[5] = static_cast<uint8_t>(config.kind);
  put<uint16_t>(h + 6, 0);
  put<uint64_t>(h + 8, n);
  put<uint32_t>(h + 16, param);
  put<uint32_t>(h + 20, config.error_feedback ? 1u : 0u);
  const uint64_t seed = checksum64(h, 24);

  DILOCO_CHECK(decoded.empty() || decoded.size() == n, "codec: a decoded copy per value, or none");
  float* dec = decoded.empty() ? nullptr : decoded.data();
  const size_t payload_size = out.size() - blob_header_bytes;
  uint64_t sum = 0;
  switch (config.kind) {
    case codec_kind::fp32:
      sum = copy_and_checksum(payload, p, n * 4, seed);
      if (dec != nullptr) std::memcpy(dec, p, n * 4);
      if (res != nullptr) std::fill(res, res + n, 0.0f);
      break;
    case codec_kind::bf16:
      bf16_encode(p, n, payload, res, dec);
      break;
    case codec_kind::int8:
      intn_encode<8>(p, n, param, payload, res, dec);
      break;
    case codec_kind::int4:
      intn_encode<4>(p, n, param, payload, res, dec);
      break;
    case codec_kind::int2:
      level_encode<int2_levels>(p, n, param, payload, res, dec);
      break;
    case codec_kind::fp4:
      level_encode<fp4_levels>(p, n, param, payload, res, dec);
      break;
    case codec_kind::sign1:
      sign1_encode(p, n, param, payload, res, dec);
      break;
    case codec_kind::topk:
      topk_encode(p, n, param, payload, res, dec);
      break;
  }
  if (config.kind != codec_kind::fp32) sum = checksum64(payload, payload_size, seed);
  put<uint64_t>(h + 24, sum);
}

}  // namespace

result<blob_header> read_header(byte_view blob) {
  auto corrupt = [](const std::string& what) {
    return status(errc::corrupt_data, "blob: " + what);
  };
  if (blob.size() < blob_header_bytes) {
    return corrupt("truncated: " + std::to_string(blob.size()) + " bytes, the header alone is " +
                   std::to_string(blob_header_bytes));
  }
  const uint8_t* h = blob.data();
  if (std::memcmp(h, blob_magic, 4) != 0) return corrupt("bad magic (not an encoded tensor)");
  if (h[4] != blob_version) {
    return corrupt("format version " + std::to_string(h[4]) + ", this build reads version " +
                   std::to_string(blob_version));
  }
  if (h[5] >= codec_kind_count) return corrupt("unknown codec id " + std::to_string(h[5]));
  if (get<uint16_t>(h + 6) != 0) return corrupt("reserved header bytes are not zero");
  blob_header hdr;
  hdr.kind = static_cast<codec_kind>(h[5]);
  hdr.count = get<uint64_t>(h + 8);
  hdr.param = get<uint32_t>(h + 16);
  hdr.flags = get<uint32_t>(h + 20);
  hdr.checksum = get<uint64_t>(h + 24);
  if (hdr.count > count_max)
    return corrupt("value count " + std::to_string(hdr.count) + " is too large");
  if (blockwise(hdr.kind) && (hdr.param < 1 || hdr.param > block_max)) {
    return corrupt("block size " + std::to_string(hdr.param) + " out of range");
  }
  if (hdr.kind == codec_kind::topk && hdr.param > hdr.count) {
    return corrupt("top-k keeps " + std::to_string(hdr.param) + " of " + std::to_string(hdr.count));
  }
  const uint64_t expected = blob_header_bytes + payload_bytes(hdr.kind, hdr.count, hdr.param);
  if (blob.size() != expected) {
    return corrupt(std::string(blob.size() < expected ? "truncated: " : "size mismatch: ") +
                   std::to_string(blob.size()) + " bytes, expected " + std::to_string(expected) +
                   " for " + std::to_string(hdr.count) + " " + to_string(hdr.kind) + " values");
  }
  return hdr;
}

namespace {

// Everything decode and decode_add share: header, shape, checksum and finiteness are checked
// before the first value is written.
template <bool ADD>
status decode_impl(byte_view blob, fspan out) {
  auto hdr = read_header(blob);
  if (!hdr) return hdr.error();
  if (hdr->count != out.size()) {
    return status(errc::shape_mismatch, "blob holds " + std::to_string(hdr->count) +
                                            " values, expected " + std::to_string(out.size()));
  }
  const uint8_t* payload = blob.data() + blob_header_bytes;
  const size_t payload_size = blob.size() - blob_header_bytes;
  const uint64_t seed = checksum64(blob.data(), 24);
  const size_t n = out.size();
  const status mismatch(errc::corrupt_data,
                        "blob: checksum mismatch (corrupted in transit or storage)");
  const status non_finite(errc::non_finite, "blob: values contain NaN or Inf");
  if (hdr->kind == codec_kind::fp32 && !ADD) {
    // Copy and verify in one pass; on a mismatch `out` holds garbage, as documented.
    if (copy_and_checksum(out.data(), payload, n * 4, seed) != hdr->checksum) return mismatch;
    return all_finite(out.data(), n) ? status() : non_finite;
  }
  if (checksum64(payload, payload_size, seed) != hdr->checksum) return mismatch;
  switch (hdr->kind) {
    case codec_kind::fp32: {
      const auto* v = reinterpret_cast<const float*>(payload);
      if (!all_finite(v, n)) return non_finite;
      for (size_t i = 0; i < n; ++i) store<ADD>(out[i], v[i]);
      break;
    }
    case codec_kind::bf16:
      if (!bf16_finite(payload, n)) return non_finite;
      bf16_decode<ADD>(payload, n, out.data());
      break;
    case codec_kind::int8:
    case codec_kind::int4:
    case codec_kind::int2:
    case codec_kind::fp4:
    case codec_kind::sign1: {
      // The largest level a code can hold: 2^bits - 1 - Q for int8 (128) and int4 (8), the top
      // magnitude for int2 and fp4; sign1 decodes +-scale.
      const float top = hdr->kind == codec_kind::int8   ? 128.0f
                        : hdr->kind == codec_kind::int4 ? 8.0f
                        : hdr->kind == codec_kind::int2 ? int2_levels::magnitude[1]
                        : hdr->kind == codec_kind::fp4  ? fp4_levels::magnitude[7]
                                                        : 1.0f;
      if (!scales_valid(payload, ceil_div(n, hdr->param), top)) {
        return status(errc::non_finite,
                      "blob: a block scale is NaN, Inf, negative or too large to decode finite");
      }
    }
      if (hdr->kind == codec_kind::int8) intn_decode<8, ADD>(payload, n, hdr->param, out.data());
      if (hdr->kind == codec_kind::int4) intn_decode<4, ADD>(payload, n, hdr->param, out.data());
      if (hdr->kind == codec_kind::int2)
        level_decode<int2_levels, ADD>(payload, n, hdr->param, out.data());
      if (hdr->kind == codec_kind::fp4)
        level_decode<fp4_levels, ADD>(payload, n, hdr->param, out.data());
      if (hdr->kind == codec_kind::sign1) sign1_decode<ADD>(payload, n, hdr->param, out.data());
      break;
    case codec_kind::topk:
      if (auto st = topk_check(payload, n, hdr->param); !st.ok()) return st;
      topk_decode<ADD>(payload, n, hdr->param, out.data());
      break;
  }
  return {};
}

}  // namespace

status decode(byte_view blob, fspan out) {
  return decode_impl<false>(blob, out);
}

status decode_add(byte_view blob, fspan out) {
  return decode_impl<true>(blob, out);
}

}  // namespace diloco
