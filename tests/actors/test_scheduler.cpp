#include "tests/catch.hpp"

#include "actors/fragment_schedule.hpp"
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

TEST_CASE("fragment schedule: due steps and the next due step agree with a brute-force walk") {
  fragment_schedule s;
  REQUIRE(s.adopt(schedule_msg{stamp{}, 8, 2, {0, 3, 5}, true, 0, 1}, 3).empty());
  // Each fragment's due steps: k > 0, k = offset (mod H).
  auto due = [&](uint32_t p, uint64_t k) { return k > 0 && k % 8 == s.offsets[p]; };
  for (uint64_t from = 0; from < 40; ++from) {
    // Every span of at most H steps: the one due step in it, or 0.
    for (uint64_t to = from; to <= from + 8; ++to) {
      for (uint32_t p = 0; p < 3; ++p) {
        uint64_t expect = 0;
        for (uint64_t k = from + 1; k <= to; ++k)
          if (due(p, k)) expect = k;
        INFO("p " << p << " (" << from << ", " << to << "]");
        REQUIRE(s.due_step(p, from, to) == expect);
      }
    }
    uint64_t next = from + 1;
    while (!(due(0, next) || due(1, next) || due(2, next))) ++next;
    INFO("after " << from);
    REQUIRE(s.next_due_after(from) == next);
  }
}

TEST_CASE("fragment schedule: a malformed schedule is refused by name and changes nothing") {
  fragment_schedule s;
  REQUIRE(s.adopt(schedule_msg{stamp{}, 4, 1, {0, 2}, true, 0, 1}, 2).empty());
  CHECK(s.adopt(schedule_msg{stamp{}, 0, 0, {0, 2}, true, 0, 1}, 2) == "H is 0");
  CHECK(s.adopt(schedule_msg{stamp{}, 4, 1, {0}, true, 0, 1}, 2) == "1 offsets for 2 fragments");
  CHECK(s.adopt(schedule_msg{stamp{}, 4, 4, {0, 2}, true, 0, 1}, 2) == "tau 4 is not below H 4");
  CHECK(s.period_steps == 4);
  CHECK(s.overlap_steps == 1);
  CHECK(s.offsets == std::vector<uint32_t>{0, 2});
}
