// What a learner (of any kind) has done since its last progress report to the metrics actor,
// and the report made of it. Plain data: persisted with the learner's state.
#pragma once

#include <cmath>
#include <cstdint>

#include "base/check.hpp"
#include "protocol/messages.hpp"
#include "runtime/env.hpp"

namespace diloco {

struct progress_meter {
  double steps = 0.0;  // whole steps, or fractional ones under the cost model
  uint64_t tokens = 0;
  double loss_sum = 0.0;  // batch losses of the steps that computed one
  int64_t busy_ns = 0;
  int64_t idle_ns = 0;
  double chip_s = 0.0;
  // Merges of global fragments: sum of relative loss changes across them, and how many.
  double gap_sum = 0.0;
  uint64_t gaps = 0;
  // The step in progress: its computing time counts once it is over, so a report never
  // claims time that has not passed (goodput stays at most 1), and a step cut short by a
  // failure or the end of the run never counts. Kept across reports.
  int64_t running_ns = 0;
  double running_chips = 0.0;

  // Computing for ns nanoseconds on `chips` working chips.
  void add_busy(int64_t ns, double chips) {
    busy_ns += ns;
    chip_s += chips * to_s(ns);
  }
  // A step of ns nanoseconds on `chips` working chips begins; step_done() counts it.
  void step_started(int64_t ns, double chips) {
    running_ns = ns;
    running_chips = chips;
  }
  void step_done() {
    add_busy(running_ns, running_chips);
    running_ns = 0;
    running_chips = 0.0;
  }
  // One whole step over `step_tokens` tokens with batch loss `loss`.
  void add_step(uint64_t step_tokens, double loss) {
    steps += 1.0;
    tokens += step_tokens;
    loss_sum += loss;
  }
  void add_gap(double relative_change) {
    gap_sum += relative_change;
    gaps += 1;
  }

  // Moves the counts into msg (whole steps only; a fractional step stays for the next report)
  // and starts over.
  void take(progress_msg& msg) {
    DILOCO_CHECK(steps >= 0.0 && busy_ns >= 0 && idle_ns >= 0 && chip_s >= 0.0,
                 "progress meter: work is never negative");
    const double whole = std::floor(steps);
    msg.steps = static_cast<uint64_t>(whole);
    msg.tokens = tokens;
    msg.train_loss = msg.steps > 0 ? loss_sum / whole : 0.0;
    msg.busy_ns = busy_ns;
    msg.idle_ns = idle_ns;
    msg.chip_s = chip_s;
    msg.merge_gap_sum = gap_sum;
    msg.merge_gaps = gaps;
    const double rest = steps - whole;
    const int64_t ns = running_ns;
    const double chips = running_chips;
    *this = progress_meter{};
    steps = rest;
    running_ns = ns;
    running_chips = chips;
  }
};

template <class F>
void persist_fields(F& f, progress_meter& x) {
  f(x.steps, x.tokens, x.loss_sum, x.busy_ns, x.idle_ns, x.chip_s, x.gap_sum, x.gaps, x.running_ns,
    x.running_chips);
}

}  // namespace diloco
