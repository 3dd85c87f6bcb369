#include <catch2/catch.hpp>

#include "actors/scheduler.hpp"

using namespace diloco;

TEST_CASE("scheduler: strided offsets spread over H, at most ceil(P/H) fragments per step") {
  for (uint32_t P : {1u, 3u, 4u, 7u, 16u, 40u}) {
    for (uint32_t H : {1u, 4u, 24u, 32u}) {
      auto off = fragment_offsets(schedule_pattern::strided, P, H);
      REQUIRE(off.size() == P);
      for (uint32_t o : off) REQUIRE(o < H);
      INFO("P " << P << " H " << H);
      CHECK(max_in_flight(off, H) == (P + H - 1) / H);
    }
  }
  CHECK(fragment_offsets(schedule_pattern::strided, 4, 32) == std::vector<uint32_t>{0, 8, 16, 24});
}

TEST_CASE("scheduler: sequential offsets sync fragments on consecutive steps") {
  CHECK(fragment_offsets(schedule_pattern::sequential, 4, 32) == std::vector<uint32_t>{0, 1, 2, 3});
  CHECK(max_in_flight(fragment_offsets(schedule_pattern::sequential, 4, 32), 32) == 1);
}
