// The simulated run's timeline (runtime/timeline.hpp): deliveries come out earliest tick
// first and, at one tick, in the order they were scheduled, as from CAF's test clock; the
// slots of delivered entries are reused; clearing it lets go of the receivers.
#include "tests/catch.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <map>
#include <utility>
#include <vector>

#include "runtime/timeline.hpp"
#include "tensor/rng.hpp"

using namespace diloco;

namespace {

caf::behavior idle(caf::event_based_actor*) {
  return {[](int) {}};
}

// The number the element carries.
int number_in(const caf::mailbox_element& e) {
  return e.content().get_as<int>(0);
}

}  // namespace

TEST_CASE("timeline: earliest tick first, ties in the order scheduled, as CAF's test clock") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto a = sys.spawn(idle);
  const auto dest = caf::actor_cast<caf::strong_actor_ptr>(a);
  sim_timeline line;
  // The reference: a multimap keeps equal keys in insertion order, as the test clock does.
  std::multimap<int64_t, int> expected;
  rng gen(11);
  int n = 0;
  auto schedule = [&](int64_t tick) {
    line.push(tick, dest, caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, n));
    expected.emplace(tick, n);
    ++n;
  };
  std::vector<std::pair<int64_t, int>> got, want;
  for (int round = 0; round < 200; ++round) {
    // A few deliveries, many of them at ticks already taken, then take some out.
    for (int k = 0; k < 5; ++k) schedule(static_cast<int64_t>(gen.below(300)));
    for (int k = 0; k < 3 && !line.empty(); ++k) {
      REQUIRE(line.next_tick() == expected.begin()->first);
      auto e = line.take_next();
      REQUIRE(e.dest == dest);
      got.emplace_back(e.tick, number_in(*e.msg));
      want.emplace_back(*expected.begin());
      expected.erase(expected.begin());
    }
  }
  CHECK(line.size() == expected.size());
  while (!line.empty()) {
    auto e = line.take_next();
    got.emplace_back(e.tick, number_in(*e.msg));
    want.emplace_back(*expected.begin());
    expected.erase(expected.begin());
  }
  CHECK(got == want);
  CHECK(expected.empty());
}

TEST_CASE("timeline: clearing it lets go of the receivers it held") {
  // The deterministic scheduler: no thread of the actor system holds a reference meanwhile.
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  auto a = sys.spawn(idle);
  sched.run();  // the actor starts and waits for messages
  caf::actor_control_block* ctrl = caf::actor_cast<caf::actor_control_block*>(a);
  const size_t refs_before = ctrl->strong_refs.load();
  sim_timeline line;
  for (int i = 0; i < 10; ++i) {
    line.push(i, caf::actor_cast<caf::strong_actor_ptr>(a),
              caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, i));
  }
  CHECK(ctrl->strong_refs.load() == refs_before + 10);
  {
    auto first = line.take_next();
    CHECK(first.tick == 0);
  }
  CHECK(ctrl->strong_refs.load() == refs_before + 9);
  line.clear();
  CHECK(line.empty());
  CHECK(ctrl->strong_refs.load() == refs_before);
  // A delivery after the clear takes a slot afresh and comes out alone.
  line.push(5, caf::actor_cast<caf::strong_actor_ptr>(a),
            caf::make_mailbox_element(nullptr, caf::make_message_id(), {}, 42));
  CHECK(line.size() == 1);
  auto e = line.take_next();
  CHECK(number_in(*e.msg) == 42);
  CHECK(line.empty());
}
