#include "protocol/vector_clock.hpp"

#include <algorithm>

#include "base/check.hpp"

namespace diloco {

vector_clock::vector_clock(std::vector<uint64_t> ticks)
    : size_(static_cast<uint32_t>(ticks.size())) {
  if (size_ <= dense_limit) {
    dense_ = std::move(ticks);
  } else {
    base_ = std::make_shared<base>();
    base_->ticks = std::move(ticks);
  }
}

void vector_clock::spill() {
  if (dense_.empty()) return;
  base_ = std::make_shared<base>();
  base_->ticks = std::move(dense_);
  dense_ = std::vector<uint64_t>();
}

uint64_t vector_clock::at(uint32_t index) const {
  if (size_ <= dense_limit) return index < dense_.size() ? dense_[index] : 0;
  auto it = std::lower_bound(over_.begin(), over_.end(), index,
                             [](const auto& e, uint32_t i) { return e.first < i; });
  if (it != over_.end() && it->first == index) return it->second;
  return base_at(index);
}

void vector_clock::raise(uint32_t index, uint64_t value) {
  auto it = std::lower_bound(over_.begin(), over_.end(), index,
                             [](const auto& e, uint32_t i) { return e.first < i; });
  if (it != over_.end() && it->first == index) {
    it->second = value;
  } else if (value != base_at(index)) {
    over_.insert(it, {index, value});
  }
}

// About sqrt(size) / 8 (a power of two), at least 8: sealing a shared base copies O(size)
// every `limit` changes, while every merge walks up to `limit` overrides on each side and every
// copy carries them. The square root alone would balance one seal against one merge, but a
// clock is merged and copied far more often than it is sealed, and a seal of a base held by no
// one else folds in place: measured at 4,096 learners (`diloco chaos`, one thread), 64
// overrides cost 1.5-1.6 us an event, 8 cost 1.2 (docs/benchmarks.md, "Thousands of learners").
size_t vector_clock::override_limit() const {
  const int bits = size_ == 0 ? 0 : 32 - __builtin_clz(size_);
  return std::max<size_t>(8, size_t{1} << std::max(0, bits / 2 - 3));
}

void vector_clock::seal(origin self) {
  origin parent;
  if (base_ == nullptr) {
    parent.kind = origin::zero;
  } else {
    parent = base_->self;
  }
  if (base_ == nullptr || base_.use_count() > 1) {
    // Shared (or none): a new base; the old one stays as it is for its other holders.
    auto fresh = std::make_shared<base>();
    fresh->ticks = ticks();
    base_ = std::move(fresh);
  } else {
    // Ours alone: fold the overrides in place.
    auto& t = base_->ticks;
    if (t.size() < size_) t.resize(size_, 0);
    for (const auto& [i, v] : over_) t[i] = v;
  }
  DILOCO_CHECK(base_->ticks.size() >= size_, "vector_clock: a sealed base holds every entry");
  base_->parent = parent;
  base_->delta = std::move(over_);
  over_.clear();
  if (self.kind == origin::event) self.version = at(self.owner);
  base_->self = self;
}

bool vector_clock::bump(uint32_t index) {
  size_ = std::max(size_, index + 1);
  if (size_ <= dense_limit) {
    if (dense_.size() < size_) dense_.resize(size_, 0);
    ++dense_[index];
    return false;
  }
  spill();
  raise(index, at(index) + 1);
  return true;
}

void vector_clock::tick(uint32_t index) {
  if (bump(index) && over_.size() > 4 * override_limit()) seal(origin{});
}

void vector_clock::event(uint32_t self) {
  if (!bump(self)) return;
  if (over_.size() > override_limit() || (base_ != nullptr && base_->self.kind == origin::unknown))
    seal(origin{origin::event, self, 0});
}

namespace {
using clock_entries = std::vector<std::pair<uint32_t, uint64_t>>;

// Buffers a merge builds entry lists in (slot 0: the result, swapped with the clock's; slot 1:
// a dense clock's entries): the buffers go round, so a merge allocates nothing once they have
// grown.
template <int Slot>
clock_entries& scratch() {
  static thread_local clock_entries s;
  s.clear();
  return s;
}

// Appends to `out` both sorted lists' entries, the higher value where both have one; an entry
// only `b` has is kept when keep_b_only(index, value) says so.
template <class Keep>
void join_into(const clock_entries& a, const clock_entries& b, clock_entries& out,
               Keep keep_b_only) {
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (j == b.size() || (i < a.size() && a[i].first < b[j].first)) {
      out.push_back(a[i++]);
    } else if (i == a.size() || b[j].first < a[i].first) {
      if (keep_b_only(b[j].first, b[j].second)) out.push_back(b[j]);
      ++j;
    } else {
      out.emplace_back(a[i].first, std::max(a[i].second, b[j].second));
      ++i;
      ++j;
    }
  }
}

// Both lists' entries, the higher value where both have one.
clock_entries joined(const clock_entries& a, const clock_entries& b) {
  clock_entries out;
  out.reserve(a.size() + b.size());
  join_into(a, b, out, [](uint32_t, uint64_t) { return true; });
  return out;
}
}  // namespace

void vector_clock::fold(const entries& extra) {
  if (extra.empty()) return;
  entries& out = scratch<0>();
  // Where this clock has no override, its value is its base's.
  join_into(over_, extra, out, [&](uint32_t i, uint64_t v) { return v > base_at(i); });
  over_.swap(out);
}

void vector_clock::rebase(const vector_clock& other, const entries& extra) {
  entries& out = scratch<0>();
  // The other's overrides all stay (this clock is below them outside `extra`); an extra entry
  // it does not override stays if it is above the other's base.
  join_into(other.over_, extra, out, [&](uint32_t i, uint64_t v) { return v > other.base_at(i); });
  base_ = other.base_;
  over_.swap(out);
}

void vector_clock::merge(const vector_clock& other) {
  size_ = std::max(size_, other.size_);
  if (size_ <= dense_limit) {
    // Both dense (the other is no longer than this).
    if (dense_.size() < size_) dense_.resize(size_, 0);
    const auto& o = other.dense_;
    for (size_t i = 0; i < o.size(); ++i) dense_[i] = std::max(dense_[i], o[i]);
    return;
  }
  spill();
  if (other.size_ <= dense_limit) {
    // A short dense clock: its non-zero entries over the zero clock.
    entries& extra = scratch<1>();
    for (uint32_t i = 0; i < other.dense_.size(); ++i)
      if (other.dense_[i] != 0) extra.emplace_back(i, other.dense_[i]);
    fold(extra);
  } else if (covers(other.base_)) {
    fold(other.over_);
  } else if (other.covers(base_)) {
    rebase(other, over_);
  } else if (covers(other.base_->parent)) {
    // Above the base the other's was sealed from: its delta and overrides are all that can be
    // higher.
    fold(joined(other.base_->delta, other.over_));
  } else if (base_ != nullptr && other.covers(base_->parent)) {
    rebase(other, joined(base_->delta, over_));
  } else {
    // Neither is known to lie below the other: entry by entry, into a base of unknown origin.
    // An override is never below its base's entry, so the result is the entry-wise max of the
    // two bases (one pass, which the compiler vectorises), then each side's overrides.
    auto fresh = std::make_shared<base>();
    auto& t = fresh->ticks;
    t.resize(size_);
    const uint64_t* a = base_ != nullptr ? base_->ticks.data() : nullptr;
    const uint64_t* b = other.base_ != nullptr ? other.base_->ticks.data() : nullptr;
    const size_t na = a != nullptr ? std::min<size_t>(base_->ticks.size(), size_) : 0;
    const size_t nb = b != nullptr ? std::min<size_t>(other.base_->ticks.size(), size_) : 0;
    const size_t both = std::min(na, nb);
    uint64_t* out = t.data();
    for (size_t i = 0; i < both; ++i) out[i] = a[i] > b[i] ? a[i] : b[i];
    if (na > both) std::copy(a + both, a + na, out + both);
    if (nb > both) std::copy(b + both, b + nb, out + both);
    for (const auto& [i, v] : over_) out[i] = std::max(out[i], v);
    for (const auto& [i, v] : other.over_) out[i] = std::max(out[i], v);
    base_ = std::move(fresh);
    over_.clear();
  }
  if (over_.size() > 4 * override_limit()) seal(origin{});
}

std::vector<uint64_t> vector_clock::ticks() const {
  if (size_ <= dense_limit) return dense_;
  std::vector<uint64_t> out;
  if (base_ != nullptr) {
    out.reserve(size_);
    out = base_->ticks;
  }
  out.resize(size_, 0);
  for (const auto& [i, v] : over_) out[i] = v;
  return out;
}

bool vector_clock::leq(const vector_clock& other) const {
  const auto a = ticks(), b = other.ticks();
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] > (i < b.size() ? b[i] : 0)) return false;
  }
  return true;
}

bool vector_clock::operator==(const vector_clock& other) const {
  return leq(other) && other.leq(*this);
}

bool vector_clock::happened_before(const vector_clock& other) const {
  return leq(other) && !other.leq(*this);
}

bool vector_clock::concurrent(const vector_clock& other) const {
  return !leq(other) && !other.leq(*this);
}

std::string vector_clock::to_string() const {
  std::string out = "[";
  bool first = true;
  for_each([&](uint64_t v) {
    if (!first) out += ",";
    first = false;
    out += std::to_string(v);
  });
  return out + "]";
}

}  // namespace diloco
