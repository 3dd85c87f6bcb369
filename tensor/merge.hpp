// Merging the outer gradients of several learners for one fragment.
//
//   weighted average:  sum w_i v_i / sum w_i
//   plain average:     the mean of the inputs with positive weight
//   RDA:               (sum w_i |v_i| / sum w_i) * phi(sum w_i phi(v_i)),  phi(x) = x / |x|
//                      (per tensor: merge_fragment)
//
// w_i is the token weight tokens^2 / steps of the work behind v_i. Inputs with weight 0 (an
// absent learner) do not count at all. A NaN or Inf in a counted input, a negative or
// non-finite weight, or a size mismatch is an error naming the input; `out` is then undefined
// and must not be used. Reductions run in a fixed order, so merges are bit-reproducible.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/span.hpp"
#include "base/status.hpp"
#include "tensor/reduce.hpp"

namespace diloco {

class job_pool;

struct fragment;

enum class merge_rule { weighted_average, rda, plain_average };

const char* to_string(merge_rule r);
result<merge_rule> parse_merge_rule(const std::string& text);

struct merge_input {
  cfspan values;
  double weight = 0.0;
};

// w = tokens^2 / steps: the amount of work times the work per step. 0 when no step was done.
double token_weight(uint64_t tokens, uint64_t steps);

using local_ranges = std::vector<std::pair<size_t, size_t>>;

// Merges the inputs over `ranges` of their common layout into the same ranges of `out`, the
// ranges taken together as one vector (RDA norms are over all of them).
status merge(merge_rule rule, span<const merge_input> inputs, const local_ranges& ranges,
             fspan out);

// Per tensor of a merged fragment (its slice there): the mean cosine between the counted
// inputs, over all pairs of them. RDA averages directions and magnitudes apart; where the
// learners' outer gradients point apart (cosine near 0) its radius keeps the mean size that a
// plain average would shrink.
struct tensor_agreement {
  uint32_t tensor = 0;  // index in the layout
  float cosine = 0.0f;
};

// Merges a whole fragment: its embedding ranges by weighted average, the rest by `rule`, RDA
// per tensor (each tensor's slice in the fragment is one vector). With `agreement`, and two or
// more counted inputs, it receives each non-embedding tensor's mean pairwise cosine. With
// `pool`, a large tensor's passes over the inputs are shared with the pool's free workers
// (memory-bound, they go faster on two cores than on one); the result is the same to the bit,
// since every sum is still taken block by block in one order.
status merge_fragment(const fragment& frag, merge_rule rule, span<const merge_input> inputs,
                      fspan out, std::vector<tensor_agreement>* agreement = nullptr,
                      job_pool* pool = nullptr);

}  // namespace diloco
