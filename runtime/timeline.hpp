// What is in flight in a simulated run: every message and timer, due at its virtual tick.
//
// CAF's test clock can hold these too (and does for a run driven by hand, as the actors' unit
// tests do), but it keeps them in a multimap of separately allocated events, one allocation
// per entry beside the message's own, and a virtual call to reach it. A simulated run sends
// one such delivery per event, so the simulation's driver keeps them here instead: a binary
// heap of (tick, order of scheduling), which delivers in exactly the order the test clock
// would (earliest tick first, ties in the order they were scheduled).
#pragma once

#include <caf/actor_clock.hpp>
#include <caf/actor_control_block.hpp>
#include <caf/mailbox_element.hpp>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/check.hpp"

namespace diloco {

class sim_timeline {
 public:
  struct entry {
    int64_t tick = 0;
    caf::strong_actor_ptr dest;
    caf::mailbox_element_ptr msg;
  };

  sim_timeline() = default;
  sim_timeline(const sim_timeline&) = delete;
  sim_timeline& operator=(const sim_timeline&) = delete;

  void push(int64_t tick, caf::strong_actor_ptr dest, caf::mailbox_element_ptr msg) {
    DILOCO_CHECK(dest != nullptr && msg != nullptr,
                 "sim_timeline: a delivery to someone of something");
    uint32_t slot;
    if (free_.empty()) {
      slot = static_cast<uint32_t>(payloads_.size());
      payloads_.emplace_back();
    } else {
      slot = free_.back();
      free_.pop_back();
    }
    payloads_[slot] = payload{std::move(dest), std::move(msg)};
    DILOCO_CHECK(payloads_.size() == heap_.size() + free_.size() + 1,
                 "sim_timeline: a payload slot lost or shared");
    heap_.push_back(key{tick, ++seq_, slot});
    std::push_heap(heap_.begin(), heap_.end(), later);
  }

  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  int64_t next_tick() const {
    DILOCO_CHECK(!heap_.empty(), "sim_timeline: the next tick of an empty timeline");
    return heap_.front().tick;
  }

  // The earliest entry, out of the timeline.
  entry take_next() {
    DILOCO_CHECK(!heap_.empty(), "sim_timeline: nothing in flight to take");
    std::pop_heap(heap_.begin(), heap_.end(), later);
    const key k = heap_.back();
    heap_.pop_back();
    payload& p = payloads_[k.slot];
    entry e{k.tick, std::move(p.dest), std::move(p.msg)};
    free_.push_back(k.slot);
    return e;
  }

  // Drops what is still in flight (a run that ends before its clock does): the entries hold
  // their receivers, which must go before the actor system does.
  void clear() {
    heap_.clear();
    payloads_.clear();
    free_.clear();
  }

  // The run's clock as its actors read it (CAF's test clock's time, which its driver moves),
  // while the driver runs; null otherwise. Reading it here spares an actor the three calls,
  // two of them virtual, of self->clock().now() at every timestamp (runtime/transport.hpp,
  // clock_ticks).
  const caf::actor_clock::time_point* clock_now = nullptr;

 private:
  // The heap orders small keys; the payloads stay put in their slots.
  struct key {
    int64_t tick;
    uint64_t seq;  // order of scheduling: ties at one tick keep it
    uint32_t slot;
  };
  struct payload {
    caf::strong_actor_ptr dest;
    caf::mailbox_element_ptr msg;
  };
  // A function object rather than a function, so that the heap's loops inline it.
  struct later_t {
    bool operator()(const key& a, const key& b) const {
      return a.tick != b.tick ? a.tick > b.tick : a.seq > b.seq;
    }
  };
  static constexpr later_t later{};

  std::vector<key> heap_;
  std::vector<payload> payloads_;
  std::vector<uint32_t> free_;
  uint64_t seq_ = 0;
};

}  // namespace diloco
