#include "tensor/rng.hpp"

#include <cmath>

#include "base/check.hpp"

namespace diloco {

namespace {
__extension__ typedef unsigned __int128 u128;  // GCC/Clang extension; -Wpedantic wants the marker

constexpr uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}
}  // namespace

void rng::reseed(uint64_t seed) {
  uint64_t sm = seed;
  for (auto& word : s_) word = splitmix64(sm);
}

uint64_t rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double rng::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

float rng::uniform_float() {
  return static_cast<float>(next() >> 40) * 0x1.0p-24f;
}

uint64_t rng::below(uint64_t bound) {
  DILOCO_CHECK(bound > 0, "rng: a draw below a positive bound");
  // Lemire's nearly divisionless method: multiply-shift, reject the biased low fringe.
  u128 m = static_cast<u128>(next()) * bound;
  auto low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      m = static_cast<u128>(next()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

double rng::normal() {
  // Polar method; the spare value is discarded so the state stays a plain 4-word array.
  for (;;) {
    const double u = 2.0 * uniform() - 1.0;
    const double v = 2.0 * uniform() - 1.0;
    const double s = u * u + v * v;
    if (s > 0.0 && s < 1.0) return u * std::sqrt(-2.0 * std::log(s) / s);
  }
}

double rng::exponential(double rate) {
  DILOCO_CHECK(rate > 0.0, "rng: an exponential of positive rate");
  return -std::log1p(-uniform()) / rate;
}

double rng::gamma(double shape) {
  DILOCO_CHECK(shape > 0.0, "rng: a gamma of positive shape");
  if (shape < 1.0) {
    // Boost the shape by one and correct with U^(1/shape) (Marsaglia-Tsang, section 6).
    const double u = uniform();
    return gamma(shape + 1.0) * std::pow(u > 0.0 ? u : 0x1.0p-53, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = 0.0;
    double v = 0.0;
    do {
      x = normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

}  // namespace diloco
