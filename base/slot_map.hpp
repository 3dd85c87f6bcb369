// A map from small slot numbers (a run's learners and regional syncers, numbered from 0) to
// values, in slot order: the part of std::map<uint32_t, T>'s interface a shard uses, stored as
// one value per slot and a bit saying which slots hold one. A shard looks up several of these
// per outer gradient; with thousands of learners a tree's dozen hops were each a likely cache
// miss, an index is one. Iteration skips empty slots 64 at a time. Saved and loaded exactly as
// the std::map it replaces (protocol/persist.hpp), so snapshots cannot tell them apart.
//
// An empty slot holds a default-constructed T (erase resets it), so T should be cheap to
// default-construct: no allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/check.hpp"

namespace diloco {

// Slots are learner slots and regional syncers' member numbers: a run has at most 4,096
// learner slots and fewer regional syncers. A larger slot is a programmer error (or, in a file
// being loaded, bad input: protocol/persist.hpp refuses it before it is used).
constexpr uint32_t slot_map_max_slots = 1u << 16;

template <class T>
class slot_map {
 public:
  using key_type = uint32_t;
  using mapped_type = T;

  // What an iterator points at: the slot and its value (as a map's pair).
  template <class V>
  struct entry {
    uint32_t first;
    V& second;
  };

  template <bool Const>
  class basic_iterator {
   public:
    using owner = std::conditional_t<Const, const slot_map, slot_map>;
    using value_ref = entry<std::conditional_t<Const, const T, T>>;
    struct arrow {
      value_ref e;
      const value_ref* operator->() const { return &e; }
    };
    basic_iterator(owner* m, size_t i) : m_(m), i_(i) {}
    template <bool C = Const, class = std::enable_if_t<C>>
    basic_iterator(const basic_iterator<false>& other)  // NOLINT: as a map's iterators convert
        : m_(other.m_), i_(other.i_) {}
    value_ref operator*() const { return value_ref{static_cast<uint32_t>(i_), m_->values_[i_]}; }
    arrow operator->() const { return arrow{**this}; }
    basic_iterator& operator++() {
      i_ = m_->next(i_ + 1);
      return *this;
    }
    bool operator==(const basic_iterator& o) const { return i_ == o.i_; }
    bool operator!=(const basic_iterator& o) const { return i_ != o.i_; }

   private:
    friend class slot_map;
    friend class basic_iterator<!Const>;
    owner* m_;
    size_t i_;
  };
  using iterator = basic_iterator<false>;
  using const_iterator = basic_iterator<true>;

  iterator begin() { return iterator(this, next(0)); }
  iterator end() { return iterator(this, values_.size()); }
  const_iterator begin() const { return const_iterator(this, next(0)); }
  const_iterator end() const { return const_iterator(this, values_.size()); }

  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  bool contains(uint32_t k) const {
    return k < values_.size() && (bits_[k / 64] >> (k % 64) & 1) != 0;
  }
  size_t count(uint32_t k) const { return contains(k) ? 1 : 0; }

  iterator find(uint32_t k) { return contains(k) ? iterator(this, k) : end(); }
  const_iterator find(uint32_t k) const { return contains(k) ? const_iterator(this, k) : end(); }

  // The value of slot k, made (default) if it holds none.
  T& operator[](uint32_t k) {
    try_emplace(k);
    return values_[k];
  }

  // Slot k's value, made from `args` (default) if it holds none; whether it was made.
  template <class... Args>
  std::pair<iterator, bool> try_emplace(uint32_t k, Args&&... args) {
    if (contains(k)) return {iterator(this, k), false};
    grow(k);
    bits_[k / 64] |= uint64_t{1} << (k % 64);
    ++count_;
    if constexpr (sizeof...(Args) > 0) values_[k] = T(std::forward<Args>(args)...);
    return {iterator(this, k), true};
  }
  template <class V>
  std::pair<iterator, bool> emplace(uint32_t k, V&& v) {
    return try_emplace(k, std::forward<V>(v));
  }

  size_t erase(uint32_t k) {
    if (!contains(k)) return 0;
    bits_[k / 64] &= ~(uint64_t{1} << (k % 64));
    values_[k] = T{};
    --count_;
    return 1;
  }
  void clear() {
    values_.clear();
    bits_.clear();
    count_ = 0;
  }

 private:
  template <bool>
  friend class basic_iterator;

  void grow(uint32_t k) {
    DILOCO_CHECK(k < slot_map_max_slots, "slot_map: a slot number of a run (learners and members)");
    if (k < values_.size()) return;
    values_.resize(size_t{k} + 1);
    bits_.resize(values_.size() / 64 + 1, 0);
  }
  // The first slot at or after i that holds a value (values_.size() if none).
  size_t next(size_t i) const {
    const size_t n = values_.size();
    while (i < n) {
      const uint64_t word = bits_[i / 64] >> (i % 64);
      if (word != 0) return i + static_cast<size_t>(__builtin_ctzll(word));
      i = (i / 64 + 1) * 64;
    }
    return n;
  }

  std::vector<T> values_;
  std::vector<uint64_t> bits_;
  size_t count_ = 0;
};

}  // namespace diloco
