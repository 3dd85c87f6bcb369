// Vector clocks: the causal stamp carried by every message (Fidge/Mattern).
//
// Dense, indexed by the actor index the cluster assigns (learners, then shards, then the
// service actors); entries beyond the stored length are zero, so clocks of clusters that grew
// mid-run still compare. Rules: tick your own entry before sending; on receipt, merge (the
// entry-wise max, the least upper bound) and tick.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace diloco {

class vector_clock {
 public:
  vector_clock() = default;
  explicit vector_clock(std::vector<uint64_t> ticks) : ticks_(std::move(ticks)) {}

  uint64_t at(uint32_t index) const { return index < ticks_.size() ? ticks_[index] : 0; }
  void tick(uint32_t index);
  void merge(const vector_clock& other);

  // Partial order: every entry <= the other's.
  bool leq(const vector_clock& other) const;
  // Strictly before: leq and different.
  bool happened_before(const vector_clock& other) const;
  // Neither happened before the other, and they differ.
  bool concurrent(const vector_clock& other) const;
  bool operator==(const vector_clock& other) const;
  bool operator!=(const vector_clock& other) const { return !(*this == other); }

  const std::vector<uint64_t>& ticks() const { return ticks_; }
  std::vector<uint64_t>& ticks() { return ticks_; }
  std::string to_string() const;

 private:
  std::vector<uint64_t> ticks_;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, vector_clock& x) {
  return f(x.ticks());
}

}  // namespace diloco
