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

  // Takes the schedule of `msg`, or says why it is not one for `fragments` fragments.
  std::string adopt(const schedule_msg& msg, size_t fragments) {
    if (msg.period_steps == 0) return "H is 0";
    if (msg.offsets.size() != fragments)
      return std::to_string(msg.offsets.size()) + " offsets for " + std::to_string(fragments) +
             " fragments";
    if (msg.overlap_steps >= msg.period_steps)
      return "tau " + std::to_string(msg.overlap_steps) + " is not below H " +
             std::to_string(msg.period_steps);
    period_steps = msg.period_steps;
    overlap_steps = msg.overlap_steps;
    offsets = msg.offsets;
    return {};
  }

  // The schedule step in (from, to] at which fragment p falls due, or 0 when it does not. A
  // span of at most H steps holds at most one due step of a fragment.
  uint64_t due_step(uint32_t p, uint64_t from, uint64_t to) const {
    DILOCO_CHECK(period_steps > 0 && p < offsets.size(), "fragment_schedule: adopted, p in range");
    const uint64_t H = period_steps, offset = offsets[p] % H;
    if (to < offset) return 0;
    const uint64_t k = to - (to - offset) % H;
    return k > from && k > 0 ? k : 0;
  }

  // The first step after `step` at which some fragment falls due.
  uint64_t next_due_after(uint64_t step) const {
    DILOCO_CHECK(period_steps > 0 && !offsets.empty(), "fragment_schedule: adopted");
    const uint64_t H = period_steps;
    uint64_t next = UINT64_MAX;
    for (uint32_t o : offsets) {
      const uint64_t off = o % H;
      const uint64_t first = step + 1;
      next = std::min(next, first + (off + H - first % H) % H);
    }
    return next;
  }
};

// What a snapshot keeps of it (protocol/persist.hpp): the fields, in this order.
template <class F>
void persist_fields(F& f, fragment_schedule& x) {
  f(x.period_steps, x.overlap_steps, x.offsets);
}

}  // namespace diloco
