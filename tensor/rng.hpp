// Seeded random numbers that are the same on every platform and every run.
//
// The generator is xoshiro256** seeded through splitmix64. The distributions are written here
// (not <random>'s, whose algorithms differ between standard libraries) so that a run is a pure
// function of (config, seed). Every actor and data stream derives its own generator from
// (run seed, role, index) with derive_seed, never from a shared one.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace diloco {

// FNV-1a, usable at compile time, for turning role names into seed material.
constexpr uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

constexpr uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The seed of one consumer of randomness: distinct roles and indices give unrelated streams.
constexpr uint64_t derive_seed(uint64_t run_seed, std::string_view role, uint64_t index) {
  uint64_t s = run_seed ^ fnv1a64(role);
  splitmix64(s);
  s ^= index * 0xd1342543de82ef95ull;
  return splitmix64(s);
}

class rng {
 public:
  explicit rng(uint64_t seed = 0) { reseed(seed); }

  void reseed(uint64_t seed);
  uint64_t next();

  double uniform();                 // [0, 1), 53 random bits
  float uniform_float();            // [0, 1), 24 random bits
  uint64_t below(uint64_t bound);   // [0, bound), unbiased (Lemire); bound > 0
  double normal();                  // mean 0, stddev 1 (Marsaglia polar method)
  double exponential(double rate);  // rate > 0
  double gamma(double shape);       // shape > 0, scale 1 (Marsaglia-Tsang)

  // The whole state, for checkpoints and replay.
  std::array<uint64_t, 4> state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& s) { s_ = s; }

 private:
  std::array<uint64_t, 4> s_{};
};

}  // namespace diloco
