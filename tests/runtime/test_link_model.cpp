// The simulated links of runtime/transport.hpp (outbox): bandwidth and queueing delay, FIFO
// delivery per pipe, and delivery ticks no two senders share.
#include "tests/catch.hpp"

#include <set>

#include "runtime/env.hpp"
#include "runtime/transport.hpp"
#include "tensor/rng.hpp"
#include "tests/hosts/small_runs.hpp"

using namespace diloco;

TEST_CASE("link model: a send takes its bytes over the bandwidth plus the latency, queued") {
  outbox out;
  link_config link;
  link.bandwidth_gbps = 8.0;  // one byte per nanosecond
  link.latency_s = 0.001;
  // 1e6 bytes at 1 byte/ns: 1 ms on the wire, then 1 ms of latency.
  CHECK(out.link_delay_ns(link, 3, 0, 1000000) == 1000000 + 1000000);
  // Sent at once behind it on the same pipe: waits for the first to leave the wire.
  CHECK(out.link_delay_ns(link, 3, 0, 1000) == 1000000 + 1000 + 1000000);
  // Another pipe is idle: no queueing.
  CHECK(out.link_delay_ns(link, 4, 0, 1000) == 1000 + 1000000);
  // Once the pipe is idle again, no queueing either.
  CHECK(out.link_delay_ns(link, 3, 5000000, 1000) == 1000 + 1000000);
}

TEST_CASE("link model: each pipe is FIFO and its delivery ticks strictly increase") {
  outbox out;
  out.scale = 1;
  rng gen(7);
  int64_t last = INT64_MIN;
  int64_t now = 0;
  for (int i = 0; i < 2000; ++i) {
    now += static_cast<int64_t>(gen.below(50));
    // Delays that shrink and grow at random: a later send may be faster on the wire.
    const int64_t delay = static_cast<int64_t>(gen.below(1000));
    const int64_t tick = out.arrival_tick(2, now, delay);
    CHECK(tick > last);  // never before an earlier send on the same pipe
    CHECK(tick >= now + std::max<int64_t>(delay, 1));  // never before its own delay
    last = tick;
  }
}

TEST_CASE("link model: senders arriving in the same nanosecond get distinct ticks") {
  run_config c = testing::fast_config();
  c.learners = 8;
  auto env = actor_env::make(c, true, {});
  REQUIRE(env.ok());
  REQUIRE((*env)->tick_scale > 1);
  std::set<int64_t> ticks;
  const uint32_t senders = (*env)->ids.count();
  for (uint32_t s = 0; s < senders; ++s) {
    outbox out;
    out.init(**env, s);
    ticks.insert(out.arrival_tick(0, 1000, 10));  // all at the same natural nanosecond
  }
  CHECK(ticks.size() == senders);
  // The order among them follows the seed (another interleave seed, another order).
  run_config other = c;
  other.interleave_seed = 99;
  auto env2 = actor_env::make(other, true, {});
  REQUIRE(env2.ok());
  std::vector<int64_t> a, b;
  for (uint32_t s = 0; s < senders; ++s) {
    outbox x, y;
    x.init(**env, s);
    y.init(**env2, s);
    a.push_back(x.arrival_tick(0, 1000, 10));
    b.push_back(y.arrival_tick(0, 1000, 10));
  }
  CHECK(a != b);
}

TEST_CASE("link model: beyond 1024 actors a slot is several nanoseconds, and 30 days still fit") {
  run_config c = testing::fast_config();
  c.learners = 1024;  // with the shards and the service actors: more than 1024 actors
  c.duration_s = 30 * 86400.0;
  auto env = actor_env::make(c, true, {});
  REQUIRE(env.ok());
  const int64_t scale = (*env)->tick_scale;
  CHECK(scale == 2048);
  CHECK(ns_per_slot(scale) == 2);
  CHECK(to_s((*env)->max_virtual_ns) > 50 * 86400.0);
  // Up to 1024 actors a slot stays one nanosecond (the runs recorded so far keep their ticks).
  CHECK(ns_per_slot(1024) == 1);
  CHECK(ns_per_slot(8192) == 8);
  // Every sender's arrival in the same slot has its own tick; a link stays FIFO and never
  // delivers before the delay, in whole slots.
  std::set<int64_t> ticks;
  const uint32_t senders = (*env)->ids.count();
  rng gen(3);
  for (uint32_t s = 0; s < senders; ++s) {
    outbox out;
    out.init(**env, s);
    ticks.insert(out.arrival_tick(0, 1000, 10));
    int64_t last = INT64_MIN, now = 0;
    for (int i = 0; s < 4 && i < 500; ++i) {
      now = out.slot_up(now + static_cast<int64_t>(gen.below(7)));
      const auto delay = static_cast<int64_t>(gen.below(5));
      const int64_t tick = out.arrival_tick(1, now, delay);
      REQUIRE(tick > last);
      REQUIRE(ticks_to_ns(tick, scale) >= now + std::max<int64_t>(delay, 1));
      REQUIRE(ticks_to_ns(tick, scale) % 2 == 0);
      last = tick;
    }
  }
  CHECK(ticks.size() == senders);
  // Longer than the clock can count: refused, naming the limit.
  c.duration_s = 60 * 86400.0;
  auto too_long = actor_env::make(c, true, {});
  REQUIRE_FALSE(too_long.ok());
  CHECK(too_long.error().message().find("can represent") != std::string::npos);
}

TEST_CASE("link model: ticks become nanoseconds as by a division, whatever the scale") {
  // The shift taken for a power-of-two scale gives the quotient of the division it replaces;
  // other scales, and ticks before the epoch, divide.
  rng g(7);
  for (int64_t scale : {int64_t{1}, int64_t{2}, int64_t{32}, int64_t{1024}, int64_t{3}, int64_t{24},
                        int64_t{1} << 40}) {
    for (int i = 0; i < 2000; ++i) {
      const auto magnitude = static_cast<int64_t>(g.next() >> (1 + g.below(63)));
      const int64_t ticks = i % 4 == 3 ? -magnitude : magnitude;
      INFO("scale " << scale << ", ticks " << ticks);
      REQUIRE(ticks_to_ns(ticks, scale) == ticks / scale * ns_per_slot(scale));
    }
    CHECK(ticks_to_ns(scale * 5 + scale - 1, scale) == 5 * ns_per_slot(scale));
    CHECK(ticks_to_ns(-scale - 1, scale) == (-scale - 1) / scale * ns_per_slot(scale));
  }
}
