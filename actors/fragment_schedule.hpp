// The staggered fragment schedule as a learner follows it (the fragment scheduler sends it in
// a schedule_msg): fragment p falls due at the schedule steps k > 0 with k = offset_p
// (mod H), and the reply to its outer gradient is mixed tau steps later. Pure functions, shared
// by the learner and the cost-model learner and unit-tested on their own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/check.hpp"
#include "protocol/messages.hpp"

namespace diloco {

struct fragment_schedule {
  uint32_t period_steps = 0;      // H
  uint32_t overlap_steps = 0;     // tau
  std::vector<uint32_t> offsets;  // per fragment
  // Adaptive inner steps: the schedule holds from step `base_step` on (offsets counted from
  // there), as the scheduler's `change`-th choice; the next one (H, tau, offsets), once it has
  // come, waits for its step in `next_*`.
  uint64_t base_step = 0;
  uint32_t change = 0;
  bool has_next = false;
  uint32_t next_period = 0;
  uint32_t next_overlap = 0;
  std::vector<uint32_t> next_offsets;
  uint64_t next_from = 0;
  uint32_t next_change = 0;

  // Takes the schedule of `msg`, or says why it is not one for `fragments` fragments.
  std::string adopt(const schedule_msg& msg, size_t fragments) {
    if (auto why = check(msg, fragments); !why.empty()) return why;
    period_steps = msg.period_steps;
    overlap_steps = msg.overlap_steps;
    offsets = msg.offsets;
    base_step = msg.from_step;
    change = msg.change;
    has_next = false;
    return {};
  }

  // A later change of H and tau (msg.change above this one's): kept until the step it applies
  // from (switch_at). An older or repeated one is ignored. Says why a malformed one is refused.
  std::string stage(const schedule_msg& msg, size_t fragments) {
    if (auto why = check(msg, fragments); !why.empty()) return why;
    if (msg.change <= (has_next ? next_change : change)) return {};
    has_next = true;
    next_period = msg.period_steps;
    next_overlap = msg.overlap_steps;
    next_offsets = msg.offsets;
    next_from = msg.from_step;
    next_change = msg.change;
    return {};
  }

  // The staged change takes over from step `at` (its own step, or later if it came late).
  void switch_at(uint64_t at) {
    DILOCO_CHECK(has_next, "fragment_schedule: a switch to a staged change");
    period_steps = next_period;
    overlap_steps = next_overlap;
    offsets = next_offsets;
    base_step = at;
    change = next_change;
    has_next = false;
  }

  // The schedule step in (from, to] at which fragment p falls due, or 0 when it does not. A
  // span of at most H steps holds at most one due step of a fragment.
  uint64_t due_step(uint32_t p, uint64_t from, uint64_t to) const {
    DILOCO_CHECK(period_steps > 0 && p < offsets.size(), "fragment_schedule: adopted, p in range");
    if (to <= base_step) return 0;
    const uint64_t H = period_steps, offset = offsets[p] % H;
    // Steps counted from the base: due at base + offset + jH, after the base.
    const uint64_t rel_to = to - base_step;
    if (rel_to < offset) return 0;
    const uint64_t k = base_step + rel_to - (rel_to - offset) % H;
    return k > from && k > base_step ? k : 0;
  }

  // The first step after `step` at which some fragment falls due.
  uint64_t next_due_after(uint64_t step) const {
    DILOCO_CHECK(period_steps > 0 && !offsets.empty(), "fragment_schedule: adopted");
    const uint64_t H = period_steps;
    const uint64_t first = std::max(step, base_step) + 1 - base_step;  // relative, >= 1
    uint64_t next = UINT64_MAX;
    for (uint32_t o : offsets) {
      const uint64_t off = o % H;
      next = std::min(next, first + (off + H - first % H) % H);
    }
    return base_step + next;
  }

 private:
  static std::string check(const schedule_msg& msg, size_t fragments) {
    if (msg.period_steps == 0) return "H is 0";
    if (msg.offsets.size() != fragments)
      return std::to_string(msg.offsets.size()) + " offsets for " + std::to_string(fragments) +
             " fragments";
    if (msg.overlap_steps >= msg.period_steps)
      return "tau " + std::to_string(msg.overlap_steps) + " is not below H " +
             std::to_string(msg.period_steps);
    return {};
  }
};

// What a snapshot keeps of it (protocol/persist.hpp): the fields, in this order.
template <class F>
void persist_fields(F& f, fragment_schedule& x) {
  f(x.period_steps, x.overlap_steps, x.offsets, x.base_step, x.change, x.has_next, x.next_period,
    x.next_overlap, x.next_offsets, x.next_from, x.next_change);
}

}  // namespace diloco
