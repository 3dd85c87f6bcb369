#include "tests/catch.hpp"

#include "actors/fragment_schedule.hpp"
#include "actors/pace.hpp"
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

namespace {

// Checks due_step over every span of at most H steps from each step in [first, last), and
// next_due_after from each, against a walk over the steps with `due(p, k)`.
template <class Due>
void check_against_walk(const fragment_schedule& s, uint64_t first, uint64_t last, Due due) {
  const auto P = static_cast<uint32_t>(s.offsets.size());
  const uint64_t H = s.period_steps;
  for (uint64_t from = first; from < last; ++from) {
    // Every span of at most H steps: the one due step in it, or 0.
    for (uint64_t to = from; to <= from + H; ++to) {
      for (uint32_t p = 0; p < P; ++p) {
        uint64_t expect = 0;
        for (uint64_t k = from + 1; k <= to; ++k)
          if (due(p, k)) expect = k;
        INFO("p " << p << " (" << from << ", " << to << "]");
        REQUIRE(s.due_step(p, from, to) == expect);
      }
    }
    uint64_t next = from + 1;
    auto any_due = [&](uint64_t k) {
      for (uint32_t p = 0; p < P; ++p)
        if (due(p, k)) return true;
      return false;
    };
    while (!any_due(next)) ++next;
    INFO("after " << from);
    REQUIRE(s.next_due_after(from) == next);
  }
}

}  // namespace

TEST_CASE("fragment schedule: due steps and the next due step agree with a brute-force walk") {
  fragment_schedule s;
  REQUIRE(s.adopt(schedule_msg{stamp{}, 8, 2, {0, 3, 5}, true, 0, 1}, 3).empty());
  // Each fragment's due steps: k > 0, k = offset (mod H).
  check_against_walk(s, 0, 40,
                     [&](uint32_t p, uint64_t k) { return k > 0 && k % 8 == s.offsets[p]; });
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

TEST_CASE("fragment schedule: a change of H holds from its step, offsets counted from there") {
  fragment_schedule s;
  REQUIRE(s.adopt(schedule_msg{stamp{}, 8, 2, {0, 4}, true, 0, 1}, 2).empty());
  schedule_msg change{stamp{}, 12, 2, {0, 6}, true, 0, 1};
  change.from_step = 20;
  change.change = 1;
  REQUIRE(s.stage(change, 2).empty());
  REQUIRE(s.has_next);
  // Before the switch the old schedule holds; the staged one is not in use yet.
  CHECK(s.due_step(1, 19, 20) == 20);
  s.switch_at(20);
  CHECK(s.period_steps == 12);
  CHECK(s.base_step == 20);
  CHECK(s.change == 1);
  // Due at 20 + offset + 12j, after the base: fragment 0 at 32, 44; fragment 1 at 26, 38.
  check_against_walk(
      s, 20, 70, [&](uint32_t p, uint64_t k) { return k > 20 && (k - 20) % 12 == s.offsets[p]; });
  CHECK(s.due_step(0, 0, 20) == 0);  // nothing of the new schedule at or before its base
  CHECK(s.next_due_after(3) == 26);
}

TEST_CASE("fragment schedule: an older or repeated change is ignored, a malformed one refused") {
  fragment_schedule s;
  REQUIRE(s.adopt(schedule_msg{stamp{}, 8, 2, {0, 4}, true, 0, 1}, 2).empty());
  schedule_msg c2{stamp{}, 16, 6, {0, 8}, true, 0, 1};
  c2.change = 2;
  c2.from_step = 40;
  REQUIRE(s.stage(c2, 2).empty());
  schedule_msg c1 = c2;
  c1.change = 1;
  c1.period_steps = 10;
  c1.offsets = {0, 5};
  REQUIRE(s.stage(c1, 2).empty());  // older than the one staged: ignored
  CHECK(s.next_period == 16);
  schedule_msg bad = c2;
  bad.change = 3;
  bad.period_steps = 6;
  CHECK(s.stage(bad, 2) == "tau 6 is not below H 6");
  bad.period_steps = 12;
  bad.offsets = {0};
  CHECK(s.stage(bad, 2) == "1 offsets for 2 fragments");
  CHECK(s.next_change == 2);
  // The staged change brings its tau along.
  s.switch_at(40);
  CHECK(s.overlap_steps == 6);
  CHECK(s.period_steps == 16);
  CHECK(s.due_step(0, 40, 56) == 56);
}

TEST_CASE("pace: a message's time on the wire, without latency and without its queue") {
  const int64_t lat = 30;
  // Alone on the link: sent at 100, 50 on the wire, in at 180.
  CHECK(transfer_ns(180, 100, -1000, lat) == 50);
  // Behind one that arrived at 200 (its last byte left at 170): sent at 100, in at 240.
  CHECK(transfer_ns(240, 100, 200, lat) == 40);
  // Without a latency it counts as transfer.
  CHECK(transfer_ns(180, 100, -1000, 0) == 80);
  CHECK(transfer_ns(100, 100, 100, lat) == 1);  // never less than a nanosecond
}

TEST_CASE("pace: the links' bandwidth, latency, busiest link and a fragment's round") {
  // 2 Gbit/s, 30 ms one way; uplinks of 1 MB (int4), replies of 8 MB (fp32), two shards with
  // two fragments each.
  const double bw = 2.0;  // bits per ns
  const int64_t lat = 30'000'000;
  std::deque<link_sample> samples;
  for (uint32_t p = 0; p < 4; ++p) {
    const uint64_t up = 1'000'000 + p * 1000, down = 8'000'000 + p * 8000;
    samples.push_back(link_sample{p, p % 2, static_cast<int64_t>(up * 8 / bw),
                                  static_cast<int64_t>(down * 8 / bw), up, down, lat});
  }
  const link_estimate e = estimate_links(samples, {2, 2});
  REQUIRE(e.ok);
  CHECK(e.bits_per_ns == Approx(bw).epsilon(1e-6));
  CHECK(e.latency_ns == lat);
  // Shard 1's replies: fragments 1 and 3.
  CHECK(e.period_bytes == 8'008'000 + 8'024'000);
  // A fragment's round: two latencies and the largest fragment's bytes both ways.
  CHECK(e.round_ns == 2 * lat + static_cast<int64_t>((1'003'000 + 8'024'000) * 8 / bw));
  // 16 MB per period at 2 Gbit/s is 64 ms of link time: with 10 ms steps at load 0.8, H 8.02;
  // the round (96 ms) asks for tau 12.03, and H goes above it.
  const pace_need n = needed(e, 10'000'000, 0.8);
  CHECK(n.overlap == Approx(static_cast<double>(e.round_ns) / 8e6));
  CHECK(n.period == 14.0);
  CHECK(needed(e, 1'000'000'000, 0.8).period == 2.0);  // one-step rounds: H just above tau

  // One slow message moves the median, not the estimate.
  samples[0].down_ns *= 3;
  CHECK(estimate_links(samples, {2, 2}).bits_per_ns == Approx(bw).epsilon(0.01));

  // A reply catching up on versions is larger; each fragment counts at its smallest.
  std::deque<link_sample> catching_up = samples;
  catching_up.push_back(samples[1]);
  catching_up.back().down_bytes *= 3;
  CHECK(estimate_links(catching_up, {2, 2}).period_bytes == e.period_bytes);

  // Only one of shard 0's fragments measured: its link's load scaled up to both.
  std::deque<link_sample> one{samples[1], samples[2]};
  CHECK(estimate_links(one, {2, 2}).period_bytes == 2 * 8'016'000);

  // No latency measured: 0, and the times are all transfer.
  samples[0].latency_ns = samples[1].latency_ns = samples[2].latency_ns = samples[3].latency_ns = 0;
  CHECK(estimate_links(samples, {2, 2}).latency_ns == 0);
  CHECK_FALSE(estimate_links({}, {1}).ok);
}

TEST_CASE("pace: H and tau go up at once to what is needed, down only past the margin") {
  const pace_bounds b{64, 4096, 4};
  auto choose = [&](uint32_t h, uint32_t tau, double need_h, double need_tau) {
    const pace_choice c = choose_pace(pace_choice{h, tau}, pace_need{need_h, need_tau}, b);
    return std::make_pair(c.period, c.overlap);
  };
  CHECK(choose(64, 4, 80.2, 2.0) == std::make_pair(81u, 4u));
  CHECK(choose(64, 4, 10.0, 9.5) == std::make_pair(64u, 10u));
  CHECK(choose(128, 10, 110.0, 9.0) == std::make_pair(128u, 10u));  // within 0.8: stays
  CHECK(choose(128, 10, 90.0, 7.0) == std::make_pair(90u, 7u));
  CHECK(choose(128, 10, 0.0, 0.0) == std::make_pair(64u, 4u));      // back to the configured
  CHECK(choose(64, 4, 1e9, 1e9) == std::make_pair(4096u, 4095u));   // the top, H above tau
  CHECK(choose(64, 4, 10.0, 100.0) == std::make_pair(101u, 100u));  // H follows tau up
}
