// A slot map (base/slot_map.hpp) is the std::map<uint32_t, T> it stands for: the same entries
// in the same order under random inserts, lookups and erases, and the same bytes when saved,
// which load back into either.
#include "tests/catch.hpp"

#include <cstdint>
#include <map>
#include <vector>

#include "base/slot_map.hpp"
#include "protocol/persist.hpp"
#include "tensor/rng.hpp"

using namespace diloco;

namespace {

void check_same(const slot_map<uint64_t>& s, const std::map<uint32_t, uint64_t>& m, uint32_t span) {
  REQUIRE(s.size() == m.size());
  REQUIRE(s.empty() == m.empty());
  std::vector<std::pair<uint32_t, uint64_t>> a, b(m.begin(), m.end());
  for (const auto& [k, v] : s) a.emplace_back(k, v);
  REQUIRE(a == b);
  for (uint32_t k = 0; k < span; ++k) {
    REQUIRE(s.count(k) == m.count(k));
    const auto it = s.find(k);
    REQUIRE((it == s.end()) == (m.find(k) == m.end()));
    if (it != s.end()) REQUIRE(it->second == m.at(k));
  }
}

}  // namespace

TEST_CASE("slot_map: the std::map it stands for, entries, order and saved bytes", "[transport]") {
  // Slots across several 64-slot words, and one far out (a regional syncer's member number).
  for (const uint32_t span : {5u, 70u, 300u}) {
    rng r(11 + span);
    slot_map<uint64_t> s;
    std::map<uint32_t, uint64_t> m;
    for (int i = 0; i < 4000; ++i) {
      const auto k = static_cast<uint32_t>(r.next() % span);
      const uint64_t v = r.next() % 1000;
      switch (r.next() % 5) {
        case 0:
          s[k] = v;
          m[k] = v;
          break;
        case 1: {
          const auto [it, made] = s.try_emplace(k, v);
          const auto [jt, made_m] = m.try_emplace(k, v);
          REQUIRE(made == made_m);
          REQUIRE(it->second == jt->second);
          it->second += 1;
          jt->second += 1;
          break;
        }
        case 2:
          REQUIRE(s.erase(k) == m.erase(k));
          break;
        case 3:
          s.emplace(k, v);
          m.emplace(k, v);
          break;
        default:
          if (auto it = s.find(k); it != s.end()) it->second = v;
          if (auto it = m.find(k); it != m.end()) it->second = v;
          break;
      }
      if (i % 97 == 0) check_same(s, m, span + 3);
    }
    check_same(s, m, span + 3);
    // Saved: the map's bytes exactly; loaded back, the same entries (into either).
    const auto bytes = save_bytes(s);
    REQUIRE(bytes == save_bytes(m));
    slot_map<uint64_t> back;
    back[2] = 99;  // loading replaces what was there
    REQUIRE(load_bytes(byte_view(bytes.data(), bytes.size()), "slot map", back).ok());
    check_same(back, m, span + 3);
    s.clear();
    REQUIRE(s.empty());
    REQUIRE(s.begin() == s.end());
  }
}

TEST_CASE("slot_map: a saved slot beyond any run's is refused when loaded, by name",
          "[transport]") {
  std::map<uint32_t, uint64_t> m{{3, 1}, {slot_map_max_slots, 2}};
  const auto bytes = save_bytes(m);
  slot_map<uint64_t> back;
  const status s = load_bytes(byte_view(bytes.data(), bytes.size()), "slot map", back);
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.message(), Catch::Contains("learner slot " + std::to_string(slot_map_max_slots)));
}
