// Vector clocks: the causal stamp carried by every message (Fidge/Mattern).
//
// Indexed by the actor index the cluster assigns (learners, then shards, then the service
// actors); entries beyond the clock's length are zero, so clocks of clusters that grew mid-run
// still compare. Rules: tick your own entry before sending; on receipt, merge (the entry-wise
// max, the least upper bound) and tick. An actor does both through `event`.
//
// With thousands of actors a dense clock copied into every stamp and merged entry by entry at
// every receipt costs O(actors) per message. So a clock is a shared, immutable base vector plus
// a few entries that differ from it (sorted). Copying shares the base; `event` ticks one entry;
// `merge` touches only the differing entries when one side's base is known to lie below the
// other clock. That knowledge is the defining property of vector clocks: a base sealed by actor
// X at its event k is X's clock at that event, and any clock whose entry X is at least k has
// seen that event and so lies above the whole base. Only `event` seals (it alone knows whose
// event the clock now stamps); a base of unknown origin (loaded, or built from a vector) never
// shortcuts a merge. Values, length and order of entries are exactly those of the dense clock.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace diloco {

class vector_clock {
 public:
  vector_clock() = default;
  explicit vector_clock(std::vector<uint64_t> ticks);

  uint64_t at(uint32_t index) const;
  // Length: one past the highest entry ever ticked or merged in (trailing zeros included).
  uint32_t size() const { return size_; }

  // Ticks entry `index` (any clock).
  void tick(uint32_t index);
  // Ticks the owner's own entry for an event of actor `self` (a send or a receipt): the clock
  // is then self's clock at that event, and may be sealed as a base others can shortcut on.
  void event(uint32_t self);
  void merge(const vector_clock& other);

  // Partial order: every entry <= the other's.
  bool leq(const vector_clock& other) const;
  // Strictly before: leq and different.
  bool happened_before(const vector_clock& other) const;
  // Neither happened before the other, and they differ.
  bool concurrent(const vector_clock& other) const;
  bool operator==(const vector_clock& other) const;
  bool operator!=(const vector_clock& other) const { return !(*this == other); }

  // The dense entries, size() of them (O(size)).
  std::vector<uint64_t> ticks() const;
  // f(value) for each entry in index order, size() calls, without building the vector.
  template <class F>
  void for_each(F&& f) const {
    if (size_ <= dense_limit) {
      for (uint64_t v : dense_) f(v);
      return;
    }
    const uint64_t* b = base_ != nullptr ? base_->ticks.data() : nullptr;
    const size_t nb = base_ != nullptr ? base_->ticks.size() : 0;
    size_t o = 0;
    for (uint32_t i = 0; i < size_; ++i) {
      uint64_t v = i < nb ? b[i] : 0;
      if (o < over_.size() && over_[o].first == i) v = over_[o++].second;
      f(v);
    }
  }
  std::string to_string() const;

  // How many entries differ from the shared base (for tests and benchmarks).
  size_t overrides() const { return over_.size(); }

 private:
  using entries = std::vector<std::pair<uint32_t, uint64_t>>;  // (index, value), sorted
  static constexpr uint32_t no_owner = UINT32_MAX;
  // Who an event clock belongs to: actor `owner`'s clock at its event `version`. A clock whose
  // entry `owner` is at least `version` lies above it. zero: the all-zero clock (below every
  // clock); unknown: nothing is known.
  struct origin {
    enum kind_t : uint8_t { unknown, zero, event } kind = unknown;
    uint32_t owner = no_owner;
    uint64_t version = 0;
  };
  struct base {
    std::vector<uint64_t> ticks;
    origin self;    // what ticks is
    origin parent;  // the base this one was sealed from: ticks = parent + delta
    entries delta;
  };

  uint64_t base_at(uint32_t index) const {
    return base_ != nullptr && index < base_->ticks.size() ? base_->ticks[index] : 0;
  }
  bool covers(const origin& o) const {
    return o.kind == origin::zero || (o.kind == origin::event && at(o.owner) >= o.version);
  }
  // Whether this clock lies above `b` entirely, known without reading it.
  bool covers(const std::shared_ptr<base>& b) const {
    return b == nullptr || b == base_ || covers(b->self);
  }
  // This clock lies above what lies under `extra` in the other clock: take the other's extra
  // entries where they are higher.
  void fold(const entries& extra);
  // The other clock lies above what lies under this clock's `extra` entries: take its base, and
  // of the entries either side has over its base, those above the other's base.
  void rebase(const vector_clock& other, const entries& extra);
  // Clocks of at most this many entries stay dense (`dense_`, size() entries; no base, no
  // overrides): copying them costs no more than copying overrides, and merging them less.
  static constexpr uint32_t dense_limit = 128;
  // A clock grown past dense_limit: its dense entries become a base of unknown origin.
  void spill();
  // Entry `index` one higher; false when the clock is dense (nothing more to keep up).
  bool bump(uint32_t index);
  // Sets entry `index` to `value` (>= its current value).
  void raise(uint32_t index, uint64_t value);
  // The overrides folded into a base of their own, which is `self`.
  void seal(origin self);
  size_t override_limit() const;

  std::shared_ptr<base> base_;   // immutable once shared
  entries over_;                 // entries above the base
  std::vector<uint64_t> dense_;  // all entries, while size() <= dense_limit
  uint32_t size_ = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, vector_clock& x) {
  // Dense on the wire and in files; a loaded clock's base has no known owner.
  if constexpr (Inspector::writes_state) {
    std::vector<uint64_t> ticks;
    struct assign {
      vector_clock& x;
      std::vector<uint64_t>& ticks;
      ~assign() { x = vector_clock(std::move(ticks)); }
    } on_exit{x, ticks};
    return f(ticks);
  } else {
    std::vector<uint64_t> ticks = x.ticks();
    return f(ticks);
  }
}

}  // namespace diloco
