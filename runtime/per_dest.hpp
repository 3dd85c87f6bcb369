// A value per destination actor of an outbox (when its link is next idle, its last arrival):
// what a std::vector indexed by the destination's actor index holds, `fill` where nothing was
// set, without a vector as long as the cluster in every actor. A learner talks to a few actors
// whose indexes come after every learner's; at 4,096 learners two such vectors took 64 KiB per
// learner, 268 MB in all, with the few entries in use on pages of their own. The table keeps a
// short sorted list until it holds `sparse_limit` entries (a learner's, a chaos actor's), then
// a dense vector (a shard's, which talks to every learner). Values, length and snapshot bytes
// are those of the vector.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/check.hpp"

namespace diloco {

template <class T>
class per_dest {
 public:
  explicit per_dest(T fill) : fill_(fill) {}

  // The vector's length: one past the highest destination written.
  uint32_t size() const { return size_; }

  T get(uint32_t dest) const {
    if (dense_mode_) return dest < dense_.size() ? dense_[dest] : fill_;
    for (const auto& [d, v] : sparse_) {
      if (d == dest) return v;
      if (d > dest) break;
    }
    return fill_;
  }

  // The entry of `dest`, `fill` if it had none (and the length grown past it).
  T& at(uint32_t dest) {
    size_ = std::max(size_, dest + 1);
    if (dense_mode_) {
      if (dest >= dense_.size()) dense_.resize(size_t{dest} + 1, fill_);
      return dense_[dest];
    }
    auto it = std::lower_bound(sparse_.begin(), sparse_.end(), dest,
                               [](const auto& e, uint32_t d) { return e.first < d; });
    if (it != sparse_.end() && it->first == dest) return it->second;
    if (sparse_.size() < sparse_limit) return sparse_.insert(it, {dest, fill_})->second;
    to_dense();
    return at(dest);
  }

  // The vector (a snapshot's bytes).
  std::vector<T> dense() const {
    if (dense_mode_) {
      std::vector<T> out = dense_;
      out.resize(size_, fill_);
      return out;
    }
    std::vector<T> out(size_, fill_);
    for (const auto& [d, v] : sparse_) out[d] = v;
    return out;
  }

  // The table of a vector (a loaded snapshot's); entries equal to `fill` take no room.
  void assign(const std::vector<T>& values) {
    DILOCO_CHECK(values.size() <= UINT32_MAX, "per_dest: an actor index fits 32 bits");
    sparse_.clear();
    dense_.clear();
    dense_mode_ = false;
    size_ = 0;
    for (uint32_t d = 0; d < values.size(); ++d)
      if (values[d] != fill_) at(d) = values[d];
    size_ = static_cast<uint32_t>(values.size());
  }

 private:
  static constexpr size_t sparse_limit = 16;

  void to_dense() {
    dense_.assign(size_, fill_);
    for (const auto& [d, v] : sparse_) dense_[d] = v;
    sparse_ = {};
    dense_mode_ = true;
  }

  T fill_;
  uint32_t size_ = 0;
  bool dense_mode_ = false;
  std::vector<std::pair<uint32_t, T>> sparse_;  // sorted by destination
  std::vector<T> dense_;
};

}  // namespace diloco
