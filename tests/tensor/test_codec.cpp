#include <cmath>
#include <cstring>
#include <limits>
#include <vector>
#include "tests/catch.hpp"

#include "base/checksum.hpp"
#include "tensor/codec.hpp"
#include "tensor/rng.hpp"

using namespace diloco;

namespace {

std::vector<float> random_vec(rng& g, size_t n, double scale = 1.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(g.normal() * scale);
  return v;
}

std::vector<float> round_trip(const codec_config& c, const std::vector<float>& v) {
  std::vector<uint8_t> blob;
  REQUIRE(encode(c, cfspan(v.data(), v.size()), fspan(), blob).ok());
  REQUIRE(blob.size() == encoded_bytes(c, v.size()));
  std::vector<float> out(v.size());
  auto st = decode(byte_view(blob.data(), blob.size()), fspan(out.data(), out.size()));
  REQUIRE(st.ok());
  return out;
}

codec_config no_feedback(codec_kind kind) {
  codec_config c = codec_config::make(kind);
  c.error_feedback = false;
  return c;
}

// Re-signs a blob whose payload or header a test edited on purpose.
void reseal(std::vector<uint8_t>& blob) {
  const uint64_t sum = checksum64(blob.data() + blob_header_bytes, blob.size() - blob_header_bytes,
                                  checksum64(blob.data(), 24));
  std::memcpy(blob.data() + 24, &sum, 8);
}

}  // namespace

TEST_CASE("codec: fp32 is exact and bf16 keeps 8 significant bits") {
  rng g(1);
  auto v = random_vec(g, 1000, 10.0);
  CHECK(round_trip(codec_config::make(codec_kind::fp32), v) == v);
  auto b = round_trip(codec_config::make(codec_kind::bf16), v);
  for (size_t i = 0; i < v.size(); ++i) {
    REQUIRE(std::fabs(b[i] - v[i]) <= std::fabs(v[i]) * (1.0f / 256.0f));
  }
}

TEST_CASE("codec: blockwise int8/int4 errors are within half a quantization step") {
  rng g(2);
  const size_t n = 256 * 7 + 100;  // a ragged last block
  auto v = random_vec(g, n);
  for (auto [kind, levels] : {std::pair{codec_kind::int8, 127}, {codec_kind::int4, 7}}) {
    const auto c = codec_config::make(kind);
    auto d = round_trip(c, v);
    for (size_t b0 = 0; b0 < n; b0 += 256) {
      const size_t e = std::min(n, b0 + 256);
      float absmax = 0;
      for (size_t i = b0; i < e; ++i) absmax = std::max(absmax, std::fabs(v[i]));
      const float step = absmax / levels;
      for (size_t i = b0; i < e; ++i) {
        INFO(to_string(kind) << " value " << i);
        REQUIRE(std::fabs(d[i] - v[i]) <= 0.5f * step * 1.0001f + 1e-7f);
      }
    }
  }
}

TEST_CASE("codec: fp4 is E2M1: its eight magnitudes exact, anything else to the nearest") {
  // One block whose absmax is 6 x 0.25: the scale is 0.25, and every E2M1 value times it is
  // exact.
  const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::vector<float> v;
  for (float m : e2m1) {
    v.push_back(m * 0.25f);
    v.push_back(-m * 0.25f);
  }
  codec_config c = no_feedback(codec_kind::fp4);
  c.block = static_cast<int>(v.size());
  CHECK(round_trip(c, v) == v);
  // Between two magnitudes: the nearer one (2.4 -> 2, 2.6 -> 3, 5.2 -> 6, 0.2 -> 0).
  std::vector<float> w = {6.0f, 2.4f, -2.6f, 5.2f, 0.2f, -0.3f};
  c.block = static_cast<int>(w.size());
  CHECK(round_trip(c, w) == std::vector<float>{6.0f, 2.0f, -3.0f, 6.0f, 0.0f, -0.5f});
  // Gaussian blocks: the error is at most half the gap around the value (the gap is 2 between
  // 4 and 6, 0.5 below 2), relative to the block's absmax / 6.
  rng g(21);
  const size_t n = 256 * 5 + 77;
  auto x = random_vec(g, n);
  auto d = round_trip(no_feedback(codec_kind::fp4), x);
  for (size_t b0 = 0; b0 < n; b0 += 256) {
    const size_t e = std::min(n, b0 + 256);
    float absmax = 0;
    for (size_t i = b0; i < e; ++i) absmax = std::max(absmax, std::fabs(x[i]));
    const float scale = absmax / 6.0f;
    for (size_t i = b0; i < e; ++i) {
      const float y = std::fabs(x[i]) / scale;
      const float half_gap = y < 2.0f ? 0.25f : y < 4.0f ? 0.5f : 1.0f;
      INFO("value " << i);
      REQUIRE(std::fabs(d[i] - x[i]) <= half_gap * scale * 1.0001f);
    }
  }
}

namespace {
// The 2-bit code int2 replaced: ternary {-a, 0, a} with a = the block's absmax (a reference for
// the test below, not a codec of ours).
std::vector<float> ternary_absmax(const std::vector<float>& x, size_t block) {
  std::vector<float> out(x.size());
  for (size_t b0 = 0; b0 < x.size(); b0 += block) {
    const size_t e = std::min(x.size(), b0 + block);
    float a = 0;
    for (size_t i = b0; i < e; ++i) a = std::max(a, std::fabs(x[i]));
    for (size_t i = b0; i < e; ++i) out[i] = a > 0 ? std::rint(x[i] / a) * a + 0.0f : 0.0f;
  }
  return out;
}
// ||x - q|| / ||x||.
double relative_error(const std::vector<float>& x, const std::vector<float>& q) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (double(x[i]) - q[i]) * (double(x[i]) - q[i]);
    norm += double(x[i]) * x[i];
  }
  return std::sqrt(err / norm);
}
}  // namespace

TEST_CASE(
    "codec: int2 is four levels with a Gaussian's least error, where ternary loses the block") {
  rng g(22);
  const size_t n = 256 * 64;
  auto x = random_vec(g, n);
  const auto q = round_trip(no_feedback(codec_kind::int2), x);
  // Four distinct magnitudes in every block, never zero: +-0.4528 and +-1.510 times its RMS.
  for (size_t b0 = 0; b0 < n; b0 += 256) {
    double ss = 0;
    for (size_t i = b0; i < b0 + 256; ++i) ss += double(x[i]) * x[i];
    const float rms = static_cast<float>(std::sqrt(ss / 256));
    for (size_t i = b0; i < b0 + 256; ++i) {
      const float level = std::fabs(q[i]) / rms;
      INFO("value " << i);
      REQUIRE((level == Approx(0.4528).epsilon(1e-4) || level == Approx(1.5104).epsilon(1e-4)));
      REQUIRE(std::signbit(q[i]) == std::signbit(x[i]));
    }
  }
  // The Lloyd-Max 4-level quantizer's mean squared error on a Gaussian is 0.1175 of its
  // variance (relative error 0.343); ternary absmax keeps only what is within a factor 2 of the
  // block's largest value: on Gaussian blocks of 256 it sends most values as 0 (0.80).
  const double e2 = relative_error(x, q), e3 = relative_error(x, ternary_absmax(x, 256));
  CHECK(e2 == Approx(0.343).margin(0.01));
  CHECK(e3 > 0.75);
  // With error feedback (p = d + e, send Q(p), keep e = p - Q(p)) over 200 rounds of fresh
  // deltas: ternary's residual settles above one delta (what it does not send piles up until
  // the block's absmax lets it out, in bursts), more than three times int2's.
  auto ef_residual = [&](bool ternary) {
    std::vector<float> e(n, 0.0f), p(n);
    double res = 0, delta = 0;
    for (int t = 0; t < 200; ++t) {
      auto d = random_vec(g, n);
      for (size_t i = 0; i < n; ++i) p[i] = d[i] + e[i];
      const auto sent =
          ternary ? ternary_absmax(p, 256) : round_trip(no_feedback(codec_kind::int2), p);
      res = delta = 0;
      for (size_t i = 0; i < n; ++i) {
        e[i] = p[i] - sent[i];
        res += double(e[i]) * e[i];
        delta += double(d[i]) * d[i];
      }
    }
    return std::sqrt(res / delta);
  };
  const double with_int2 = ef_residual(false), with_ternary = ef_residual(true);
  CHECK(with_int2 < 1.0);
  CHECK(with_ternary > 3.0 * with_int2);
}

TEST_CASE("codec: sign1 sends the sign with the block's mean magnitude") {
  std::vector<float> v = {1.0f, -3.0f, 2.0f, -2.0f};
  codec_config c = codec_config::make(codec_kind::sign1);
  c.block = 4;
  c.error_feedback = false;
  auto d = round_trip(c, v);
  CHECK(d == std::vector<float>{2.0f, -2.0f, 2.0f, -2.0f});
}

TEST_CASE("codec: top-k keeps exactly the k largest magnitudes") {
  std::vector<float> v(100);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = (i % 2 ? -1.0f : 1.0f) * static_cast<float>((i * 37) % 100);
  codec_config c = codec_config::make(codec_kind::topk);
  c.topk_fraction = 0.05;
  c.error_feedback = false;
  auto d = round_trip(c, v);
  int kept = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (d[i] != 0.0f) {
      ++kept;
      CHECK(d[i] == v[i]);
      CHECK(std::fabs(v[i]) >= 95.0f);
    }
  }
  CHECK(kept == 5);
}

TEST_CASE("codec: with error feedback the decoded running sum tracks the input running sum") {
  rng g(3);
  const size_t n = 2048;
  for (auto kind :
       {codec_kind::sign1, codec_kind::topk, codec_kind::int2, codec_kind::int4, codec_kind::fp4}) {
    codec_config c = codec_config::make(kind);
    c.error_feedback = true;
    std::vector<float> residual(n, 0.0f), decoded(n);
    std::vector<double> sum_in(n, 0.0), sum_out(n, 0.0);
    std::vector<uint8_t> blob;
    double residual_norm_50 = 0;
    for (int t = 1; t <= 200; ++t) {
      auto d = random_vec(g, n, 0.01);
      REQUIRE(encode(c, cfspan(d.data(), n), fspan(residual.data(), n), blob).ok());
      REQUIRE(decode(byte_view(blob.data(), blob.size()), fspan(decoded.data(), n)).ok());
      double gap = 0, res = 0;
      for (size_t i = 0; i < n; ++i) {
        sum_in[i] += d[i];
        sum_out[i] += decoded[i];
        // Identity of error feedback: sum of inputs - sum of sent = current residual.
        gap = std::max(gap, std::fabs(sum_in[i] - sum_out[i] - residual[i]));
        res += static_cast<double>(residual[i]) * residual[i];
      }
      INFO(to_string(kind) << " round " << t);
      REQUIRE(gap < 1e-4);
      if (t == 50) residual_norm_50 = std::sqrt(res);
      if (t == 200) {
        // The residual stays bounded: it does not grow with the number of rounds.
        CHECK(std::sqrt(res) < 2.0 * residual_norm_50 + 1e-3);
      }
    }
    // Without error feedback the sign codec's sum drifts much further from the inputs' sum.
    double ef_err = 0, norm_in = 0;
    for (size_t i = 0; i < n; ++i) {
      ef_err += (sum_in[i] - sum_out[i]) * (sum_in[i] - sum_out[i]);
      norm_in += sum_in[i] * sum_in[i];
    }
    INFO(to_string(kind));
    CHECK(std::sqrt(ef_err / norm_in) < 0.6);
  }
}

TEST_CASE("codec: compression ratios follow from the formats") {
  const size_t n = 1 << 20;
  CHECK(expected_compression_ratio(codec_config::make(codec_kind::fp32), n) ==
        Approx(1.0).epsilon(1e-4));
  CHECK(expected_compression_ratio(codec_config::make(codec_kind::bf16), n) ==
        Approx(2.0).epsilon(1e-4));
  CHECK(expected_compression_ratio(codec_config::make(codec_kind::int8), n) ==
        Approx(1024.0 / 260).epsilon(1e-3));
  CHECK(expected_compression_ratio(codec_config::make(codec_kind::int4), n) ==
        Approx(1024.0 / 132).epsilon(1e-3));
  CHECK(expected_compression_ratio(codec_config::make(codec_kind::int2), n) ==
        Approx(1024.0 / 68).epsilon(1e-3));
  CHECK(expected_compression_ratio(codec_config::make(codec_kind::fp4), n) ==
        Approx(1024.0 / 132).epsilon(1e-3));
  CHECK(expected_compression_ratio(codec_config::make(codec_kind::sign1), n) ==
        Approx(1024.0 / 36).epsilon(1e-3));
  CHECK(expected_compression_ratio(codec_config::make(codec_kind::topk), n) ==
        Approx(50.0).epsilon(1e-3));
}

TEST_CASE("codec: every truncation of a blob is an error, never a crash") {
  rng g(4);
  auto v = random_vec(g, 600);
  for (int k = 0; k < codec_kind_count; ++k) {
    const auto c = no_feedback(static_cast<codec_kind>(k));
    std::vector<uint8_t> blob;
    REQUIRE(encode(c, cfspan(v.data(), v.size()), fspan(), blob).ok());
    std::vector<float> out(v.size());
    for (size_t len = 0; len < blob.size(); ++len) {
      auto st = decode(byte_view(blob.data(), len), fspan(out.data(), out.size()));
      REQUIRE_FALSE(st.ok());
      REQUIRE(st.code() == errc::corrupt_data);
    }
    blob.push_back(0);
    CHECK(decode(byte_view(blob.data(), blob.size()), fspan(out.data(), out.size()))
              .message()
              .find("size mismatch") != std::string::npos);
  }
}

TEST_CASE("codec: any flipped bit is detected") {
  rng g(5);
  auto v = random_vec(g, 300);
  for (auto kind : {codec_kind::fp32, codec_kind::int4, codec_kind::topk}) {
    std::vector<uint8_t> blob;
    REQUIRE(encode(no_feedback(kind), cfspan(v.data(), v.size()), fspan(), blob).ok());
    std::vector<float> out(v.size());
    for (size_t byte = 0; byte < blob.size(); byte += 7) {
      for (int bit = 0; bit < 8; bit += 3) {
        auto bad = blob;
        bad[byte] ^= static_cast<uint8_t>(1u << bit);
        INFO(to_string(kind) << " byte " << byte << " bit " << bit);
        REQUIRE_FALSE(
            decode(byte_view(bad.data(), bad.size()), fspan(out.data(), out.size())).ok());
      }
    }
  }
}

TEST_CASE("codec: header fields are validated with clear messages") {
  rng g(6);
  auto v = random_vec(g, 64);
  std::vector<uint8_t> blob;
  REQUIRE(
      encode(codec_config::make(codec_kind::int8), cfspan(v.data(), v.size()), fspan(), blob).ok());
  std::vector<float> out(64), wrong(65);
  CHECK(decode(byte_view(blob.data(), blob.size()), fspan(wrong.data(), 65)).code() ==
        errc::shape_mismatch);

  auto bad = blob;
  bad[0] = 'X';
  CHECK(decode(byte_view(bad.data(), bad.size()), fspan(out.data(), 64)).message().find("magic") !=
        std::string::npos);
  bad = blob;
  bad[4] = 9;
  CHECK(
      decode(byte_view(bad.data(), bad.size()), fspan(out.data(), 64)).message().find("version") !=
      std::string::npos);
  bad = blob;
  bad[5] = 200;
  CHECK(decode(byte_view(bad.data(), bad.size()), fspan(out.data(), 64))
            .message()
            .find("unknown codec") != std::string::npos);
  bad = blob;
  bad[8] = 0xff;  // count becomes huge
  bad[15] = 0xff;
  CHECK_FALSE(decode(byte_view(bad.data(), bad.size()), fspan(out.data(), 64)).ok());
  bad = blob;
  bad[16] = 0;  // block size 0
  bad[17] = 0;
  CHECK(read_header(byte_view(bad.data(), bad.size())).error().message().find("block size") !=
        std::string::npos);
}

TEST_CASE("codec: a correctly sealed top-k blob with bad indices is rejected") {
  std::vector<float> v = {5, 0, 0, 4, 0, 0, 0, 0, 0, 3};
  codec_config c = codec_config::make(codec_kind::topk);
  c.topk_fraction = 0.3;
  c.error_feedback = false;
  std::vector<uint8_t> blob;
  REQUIRE(encode(c, cfspan(v.data(), v.size()), fspan(), blob).ok());
  std::vector<float> out(v.size());
  REQUIRE(decode(byte_view(blob.data(), blob.size()), fspan(out.data(), out.size())).ok());
  auto swapped = blob;  // indices 0, 3, 9 -> 3, 0, 9
  std::swap_ranges(swapped.begin() + 32, swapped.begin() + 36, swapped.begin() + 36);
  reseal(swapped);
  CHECK(decode(byte_view(swapped.data(), swapped.size()), fspan(out.data(), out.size()))
            .message()
            .find("out of order") != std::string::npos);
  auto beyond = blob;
  beyond[32 + 8] = 50;  // index 9 -> 50 >= 10
  reseal(beyond);
  CHECK_FALSE(decode(byte_view(beyond.data(), beyond.size()), fspan(out.data(), out.size())).ok());
}

TEST_CASE("codec: decoding never yields NaN or Inf and such blobs are non_finite errors") {
  for (int k = 0; k < codec_kind_count; ++k) {
    const auto kind = static_cast<codec_kind>(k);
    std::vector<float> v(600, 0.5f);
    v[123] = std::numeric_limits<float>::quiet_NaN();
    v[400] = -std::numeric_limits<float>::infinity();
    codec_config c = no_feedback(kind);
    c.topk_fraction = 0.5;  // keep the bad values among the sent ones
    std::vector<uint8_t> blob;
    // encode refuses them, naming the first; a faulty peer's encoder might not.
    const status refused = encode(c, cfspan(v.data(), v.size()), fspan(), blob);
    CHECK(refused.code() == errc::non_finite);
    CHECK(refused.message() == "value 123 of 600 is NaN");
    encode_unchecked_for_tests(c, cfspan(v.data(), v.size()), blob);
    std::vector<float> out(v.size());
    INFO(to_string(kind));
    CHECK(decode(byte_view(blob.data(), blob.size()), fspan(out.data(), out.size())).code() ==
          errc::non_finite);
    std::vector<float> fine(600, 0.25f);
    REQUIRE(encode(c, cfspan(fine.data(), fine.size()), fspan(), blob).ok());
    CHECK(decode(byte_view(blob.data(), blob.size()), fspan(out.data(), out.size())).ok());
  }
}

TEST_CASE("codec: encode's decoded output equals decode bit for bit and decode_add adds it") {
  rng g(9);
  auto v = random_vec(g, 1000);
  for (int k = 0; k < codec_kind_count; ++k) {
    codec_config c = codec_config::make(static_cast<codec_kind>(k));
    std::vector<float> residual(v.size(), 0.01f), tap(v.size()), out(v.size());
    std::vector<uint8_t> blob;
    REQUIRE(encode(c, cfspan(v.data(), v.size()), fspan(residual.data(), residual.size()), blob,
                   fspan(tap.data(), tap.size()))
                .ok());
    REQUIRE(decode(byte_view(blob.data(), blob.size()), fspan(out.data(), out.size())).ok());
    INFO(to_string(c.kind));
    CHECK(std::memcmp(out.data(), tap.data(), out.size() * 4) == 0);
    std::vector<float> acc(v.size(), 1.0f);
    REQUIRE(decode_add(byte_view(blob.data(), blob.size()), fspan(acc.data(), acc.size())).ok());
    for (size_t i = 0; i < v.size(); ++i) REQUIRE(acc[i] == 1.0f + out[i]);
    // A bad blob leaves the accumulator untouched.
    auto bad = blob;
    bad.back() ^= 1;
    auto before = acc;
    CHECK_FALSE(decode_add(byte_view(bad.data(), bad.size()), fspan(acc.data(), acc.size())).ok());
    CHECK(acc == before);
  }
}

TEST_CASE("codec: encode_accumulated equals encode with the values added to the residual") {
  rng g(12);
  auto v = random_vec(g, 777);
  for (auto kind : {codec_kind::int4, codec_kind::sign1, codec_kind::topk, codec_kind::fp32}) {
    codec_config c = codec_config::make(kind);
    c.error_feedback = true;
    std::vector<float> ra(v.size(), 0.02f), rb = ra;
    std::vector<uint8_t> a, b;
    REQUIRE(encode(c, cfspan(v.data(), v.size()), fspan(ra.data(), ra.size()), a).ok());
    for (size_t i = 0; i < v.size(); ++i) rb[i] += v[i];
    REQUIRE(encode_accumulated(c, fspan(rb.data(), rb.size()), b).ok());
    INFO(to_string(kind));
    CHECK(a == b);
    CHECK(ra == rb);
  }
}

TEST_CASE("codec: names parse and bad configs are rejected") {
  for (int k = 0; k < codec_kind_count; ++k) {
    auto kind = static_cast<codec_kind>(k);
    REQUIRE(parse_codec_kind(to_string(kind)).ok());
    CHECK(*parse_codec_kind(to_string(kind)) == kind);
  }
  CHECK_FALSE(parse_codec_kind("int3").ok());
  codec_config c;
  c.block = 0;
  CHECK_FALSE(c.validate().ok());
  c = codec_config{};
  c.topk_fraction = 0;
  CHECK_FALSE(c.validate().ok());
}

TEST_CASE("codec: encode refuses non-finite input with every codec, with and without feedback") {
  for (int k = 0; k < codec_kind_count; ++k) {
    const auto kind = static_cast<codec_kind>(k);
    INFO(to_string(kind));
    for (const bool feedback : {false, true}) {
      codec_config c = codec_config::make(kind);
      c.error_feedback = feedback;
      std::vector<float> v(3000, 0.25f);
      v[2500] = std::numeric_limits<float>::infinity();
      std::vector<float> residual(v.size(), 0.0f);
      std::vector<uint8_t> blob;
      const status s = encode(c, cfspan(v.data(), v.size()),
                              fspan(residual.data(), feedback ? residual.size() : 0), blob);
      CHECK(s.code() == errc::non_finite);
      CHECK(s.message() == "value 2500 of 3000 is Inf");
    }
  }
  // The scan finds the first bad value wherever it is, and none in finite data.
  std::vector<float> w(5000, 1.0f);
  CHECK(first_non_finite(cfspan(w.data(), w.size())) == w.size());
  w[4999] = -std::numeric_limits<float>::quiet_NaN();
  w[1024] = std::numeric_limits<float>::quiet_NaN();
  CHECK(first_non_finite(cfspan(w.data(), w.size())) == 1024);
  w[1] = -std::numeric_limits<float>::infinity();
  CHECK(first_non_finite(cfspan(w.data(), w.size())) == 1);
  w[1] = std::numeric_limits<float>::max();  // large but finite
  w[1024] = std::numeric_limits<float>::denorm_min();
  CHECK(first_non_finite(cfspan(w.data(), w.size())) == 4999);
}

TEST_CASE("codec: a sealed blob whose block scale would decode to Inf is refused") {
  // Found by bench/fuzz_inputs: a finite scale of 3e38 times level 7 is Inf.
  for (const auto kind :
       {codec_kind::int8, codec_kind::int4, codec_kind::int2, codec_kind::fp4, codec_kind::sign1}) {
    INFO(to_string(kind));
    std::vector<float> v(600, 0.5f);
    v[10] = -1.0f;
    std::vector<uint8_t> blob;
    REQUIRE(encode(no_feedback(kind), cfspan(v.data(), v.size()), fspan(), blob).ok());
    std::vector<float> out(v.size());
    REQUIRE(decode(byte_view(blob.data(), blob.size()), fspan(out.data(), out.size())).ok());
    // Too large for the top level (int8: 127, int4: 7, fp4: 6, int2: 1.51; sign1 decodes
    // +-scale, finite for any finite scale), or negative (no encoder writes one).
    const bool wide = kind != codec_kind::sign1;
    for (const float scale : {wide ? 3e38f : -2.0f, -1.0f}) {
      auto bad = blob;
      std::memcpy(bad.data() + blob_header_bytes, &scale, 4);  // the first block's scale
      reseal(bad);
      const status st = decode(byte_view(bad.data(), bad.size()), fspan(out.data(), out.size()));
      CHECK(st.code() == errc::non_finite);
    }
  }
}

namespace {

// The blockwise encoders as first written, one value at a time (scale, code and the decoded
// value per value, codes packed low bits first after the block scales): what the vectorized
// encoders must produce to the bit.
struct reference_code {
  std::vector<uint8_t> payload;
  std::vector<float> decoded;
};
reference_code reference_encode(codec_kind kind, int block, const std::vector<float>& x) {
  const size_t n = x.size(), b = static_cast<size_t>(block);
  const size_t blocks = (n + b - 1) / b;
  const int bits = kind == codec_kind::int8                              ? 8
                   : kind == codec_kind::int4 || kind == codec_kind::fp4 ? 4
                   : kind == codec_kind::int2                            ? 2
                                                                         : 1;
  reference_code r;
  r.payload.assign(blocks * 4 + (n * static_cast<size_t>(bits) + 7) / 8, 0);
  r.decoded.resize(n);
  static const float fp4_mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  static const float fp4_mid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  static const float int2_mag[2] = {0.4528f, 1.5104f};
  static const float int2_mid[1] = {0.9816f};
  for (size_t blk = 0; blk < blocks; ++blk) {
    const size_t b0 = blk * b, len = std::min(b, n - b0);
    float scale = 0.0f, inverse = 0.0f;
    const int q = (1 << (bits - 1)) - 1;
    if (kind == codec_kind::int8 || kind == codec_kind::int4 || kind == codec_kind::fp4) {
      float absmax = 0.0f;
      for (size_t j = 0; j < len; ++j) absmax = std::max(absmax, std::fabs(x[b0 + j]));
      const float top = kind == codec_kind::fp4 ? 6.0f : static_cast<float>(q);
      scale = absmax / top;
      inverse = kind == codec_kind::fp4 ? (scale > 0.0f ? 1.0f / scale : 0.0f)
                                        : (absmax > 0.0f ? top / absmax : 0.0f);
    } else if (kind == codec_kind::int2) {
      // As the encoder sums: 16 lanes, then the tail, then the lanes.
      float lane[16] = {}, s = 0.0f;
      size_t j = 0;
      for (; j + 16 <= len; j += 16)
        for (int k = 0; k < 16; ++k) lane[k] += x[b0 + j + k] * x[b0 + j + k];
      for (; j < len; ++j) s += x[b0 + j] * x[b0 + j];
      for (float v : lane) s += v;
      scale = std::sqrt(s / static_cast<float>(len));
      inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
    } else {  // sign1
      float lane[16] = {}, s = 0.0f;
      size_t j = 0;
      for (; j + 16 <= len; j += 16)
        for (int k = 0; k < 16; ++k) lane[k] += std::fabs(x[b0 + j + k]);
      for (; j < len; ++j) s += std::fabs(x[b0 + j]);
      for (float v : lane) s += v;
      scale = s / static_cast<float>(len);
    }
    std::memcpy(r.payload.data() + blk * 4, &scale, 4);
    for (size_t j = 0; j < len; ++j) {
      const size_t i = b0 + j;
      unsigned code = 0;
      float recon = 0.0f;
      if (kind == codec_kind::int8 || kind == codec_kind::int4) {
        const float qf = static_cast<float>(q);
        const float c = std::min(std::max(std::rint(x[i] * inverse), -qf), qf) + 0.0f;
        recon = c * scale;
        code = static_cast<unsigned>(static_cast<int>(c) + q);
      } else if (kind == codec_kind::fp4 || kind == codec_kind::int2) {
        const bool fp4 = kind == codec_kind::fp4;
        const float* mag = fp4 ? fp4_mag : int2_mag;
        const float* mid = fp4 ? fp4_mid : int2_mid;
        const int levels = fp4 ? 8 : 2;
        const float y = std::fabs(x[i]) * inverse;
        unsigned m = 0;
        for (int t = 0; t < levels - 1; ++t) m += y > mid[t] ? 1u : 0u;
        const unsigned negative = x[i] < 0.0f ? 1u : 0u;
        recon = (negative != 0 ? -mag[m] : mag[m]) * scale;
        code = negative << (bits - 1) | m;
      } else {
        recon = x[i] >= 0.0f ? scale : -scale;
        code = x[i] >= 0.0f ? 1u : 0u;
      }
      r.decoded[i] = recon;
      const size_t per_byte = static_cast<size_t>(8 / bits);
      r.payload[blocks * 4 + i / per_byte] |=
          static_cast<uint8_t>(code << (static_cast<size_t>(bits) * (i % per_byte)));
    }
  }
  return r;
}

}  // namespace

TEST_CASE("codec: the blockwise encoders match a value-at-a-time reference to the bit") {
  rng g(31);
  // Gaussian values; ties of the rounding (block absmax 7 or 6: values at k + 0.5 and at the
  // fp4 midpoints exactly), small negatives that round to -0, zero blocks, a huge block, and
  // lengths that end inside a block and inside a byte.
  std::vector<std::vector<float>> cases;
  cases.push_back(random_vec(g, 5000, 1e-3));
  // Groups of 7 led by the block's absmax, so that every block size here has that absmax.
  auto groups = [](float top, const std::vector<float>& values) {
    std::vector<float> v;
    for (float t : values) {
      v.push_back(top);
      for (int k = 0; k < 6; ++k) v.push_back(k % 2 == 0 ? t : -t);
    }
    return v;
  };
  std::vector<float> halves;  // int8/int4 with absmax 7: x / scale at k + 0.5 (int4)
  for (int k = 0; k <= 6; ++k) halves.push_back(static_cast<float>(k) + 0.5f);
  halves.push_back(0.2f);  // rounds to -0 when negative
  cases.push_back(groups(7.0f, halves));
  // fp4 with absmax 6: |x| / scale exactly at the midpoints
  cases.push_back(groups(6.0f, {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.0f}));
  std::vector<float> mixed = random_vec(g, 1031, 3.0);
  for (size_t i = 256; i < 512; ++i) mixed[i] = 0.0f;
  for (size_t i = 512; i < 768; ++i) mixed[i] = static_cast<float>(g.normal() * 1e30);
  for (size_t i = 768; i < 800; ++i) mixed[i] = -1e-40f;  // subnormal
  cases.push_back(mixed);
  for (codec_kind kind :
       {codec_kind::int8, codec_kind::int4, codec_kind::int2, codec_kind::fp4, codec_kind::sign1}) {
    for (int block : {256, 32, 7}) {
      for (const auto& v : cases) {
        INFO(to_string(kind) << " block " << block << " n " << v.size());
        codec_config c = codec_config::make(kind);
        c.error_feedback = false;
        c.block = block;
        std::vector<uint8_t> blob;
        std::vector<float> tap(v.size());
        REQUIRE(encode(c, cfspan(v.data(), v.size()), fspan(), blob, fspan(tap.data(), tap.size()))
                    .ok());
        const reference_code want = reference_encode(kind, block, v);
        REQUIRE(blob.size() == blob_header_bytes + want.payload.size());
        CHECK(std::memcmp(blob.data() + blob_header_bytes, want.payload.data(),
                          want.payload.size()) == 0);
        CHECK(std::memcmp(tap.data(), want.decoded.data(), v.size() * 4) == 0);
      }
    }
  }
}
