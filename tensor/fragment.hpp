// Cutting the model into P fragments that are synchronized on a staggered schedule.
//
// A fragment is a fixed list of spans of the flat parameter buffer. Its "local" layout is the
// concatenation of those spans: that is what a learner encodes and a syncer merges. Spans of
// the embedding table are marked so the merge can average them while the rest uses RDA.
//
// Balanced packing splits any tensor larger than a third of the ideal fragment size into
// pieces, then places pieces largest first into the lightest fragment (LPT). The lightest
// fragment holds at most the ideal before a piece lands, so no fragment ends above
// ideal + ideal/3: the 4/3 bound holds for every tensor-size set, not just friendly ones.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "tensor/params.hpp"

namespace diloco {

struct param_span {
  size_t offset = 0;  // in the flat buffer
  size_t count = 0;
  bool embedding = false;
  uint32_t tensor = 0;  // its tensor's index in the layout
};

struct fragment {
  int id = 0;
  std::vector<param_span> spans;  // sorted by offset
  size_t size = 0;                // sum of span counts

  // Copies the fragment's values out of a buffer in the parameter layout, and back.
  void gather(const float* buffer, float* local) const;
  void scatter(const float* local, float* buffer) const;
  // Calls fn(buffer_ptr, local_ptr, count) for each span in order: the way to write a fused
  // loop over a fragment without gathering it first.
  template <class F>
  void for_each_span(F&& fn, float* buffer) const {
    size_t at = 0;
    for (const auto& s : spans) {
      fn(buffer + s.offset, at, s.count);
      at += s.count;
    }
  }
  // [begin, end) ranges of the local layout that belong to the embedding or to the rest.
  std::vector<std::pair<size_t, size_t>> local_ranges(bool embedding) const;
  // The non-embedding ranges grouped by tensor (each tensor's slice in the fragment), tensors
  // in the order their first span comes.
  std::vector<std::pair<uint32_t, std::vector<std::pair<size_t, size_t>>>> tensor_ranges() const;
};

enum class fragment_pattern { balanced, strided };

const char* to_string(fragment_pattern p);
result<fragment_pattern> parse_fragment_pattern(const std::string& text);

struct fragment_plan {
  std::vector<fragment> fragments;

  size_t largest() const;
  size_t total() const;
  // largest / (total / P): 1.0 is a perfect split.
  double imbalance() const;
};

// Balanced packing of the layout's tensors into `count` fragments (see the file comment).
result<fragment_plan> plan_balanced(const param_layout& layout, int count);
// Strided by layer: layer l (0 = embedding) goes to fragment l mod count, whole.
result<fragment_plan> plan_strided(const param_layout& layout, int count);
result<fragment_plan> plan_fragments(const param_layout& layout, int count, fragment_pattern p);

// The packing itself on bare sizes, for tests and tools: returns, per fragment, the sizes of
// the pieces assigned to it.
std::vector<std::vector<size_t>> pack_sizes(const std::vector<size_t>& sizes, int count);

}  // namespace diloco
