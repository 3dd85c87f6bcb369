#include "protocol/vector_clock.hpp"

#include <algorithm>

namespace diloco {

void vector_clock::tick(uint32_t index) {
  if (index >= ticks_.size()) ticks_.resize(index + 1, 0);
  ++ticks_[index];
}

void vector_clock::merge(const vector_clock& other) {
  if (other.ticks_.size() > ticks_.size()) ticks_.resize(other.ticks_.size(), 0);
  for (size_t i = 0; i < other.ticks_.size(); ++i) ticks_[i] = std::max(ticks_[i], other.ticks_[i]);
}

bool vector_clock::leq(const vector_clock& other) const {
  for (size_t i = 0; i < ticks_.size(); ++i) {
    if (ticks_[i] > other.at(static_cast<uint32_t>(i))) return false;
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
  for (size_t i = 0; i < ticks_.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(ticks_[i]);
  }
  return out + "]";
}

}  // namespace diloco
