#include "tensor/merge.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "base/check.hpp"
#include "base/job_pool.hpp"
#include "tensor/fragment.hpp"

namespace diloco {

namespace {
constexpr size_t block_floats = 4096;  // 16 KiB: the output block stays in L1 while inputs stream

using vec_map = Eigen::Map<Eigen::VectorXf>;
using cvec_map = Eigen::Map<const Eigen::VectorXf>;

status input_error(size_t index, const std::string& what) {
  return status(errc::non_finite, "merge input " + std::to_string(index) + ": " + what);
}

// The index of the first counted input with a non-finite value in the ranges, if any.
status find_non_finite(span<const merge_input> inputs, const local_ranges& ranges) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].weight == 0.0) continue;
    for (const auto& [b, e] : ranges) {
      if (!cvec_map(inputs[i].values.data() + b, e - b).allFinite()) {
        return input_error(i, "contains NaN or Inf");
      }
    }
  }
  return status(errc::non_finite, "merge result is not finite (values overflow float)");
}

// The blocks of `ranges`: each range cut into blocks of block_floats from its start, in order
// (the order every sum over them is taken in).
struct block_span {
  size_t begin, size;
  size_t range;  // index of its range
};
struct range_blocks {
  std::vector<block_span> blocks;
  size_t floats = 0;  // in all the ranges
};
range_blocks blocks_of(const local_ranges& ranges) {
  range_blocks out;
  for (size_t r = 0; r < ranges.size(); ++r) {
    out.floats += ranges[r].second - ranges[r].first;
    for (size_t b = ranges[r].first; b < ranges[r].second; b += block_floats)
      out.blocks.push_back({b, std::min(block_floats, ranges[r].second - b), r});
  }
  return out;
}

// A merge over at least this many floats is shared with the pool's free workers.
constexpr size_t parallel_floats = size_t{1} << 20;
constexpr size_t blocks_per_claim = 16;  // 256 KiB of each input at a time

// Runs body(k) for every block k in [0, count): on the calling thread and, with `pool`, on the
// pool's workers that are free now (a busy worker that starts late finds nothing left and
// leaves at once). Returns when every block is done. Each body(k) writes only what belongs to
// block k, so which thread runs it changes nothing: the sums over blocks are taken afterwards,
// in block order, exactly as one thread takes them.
template <class Body>
void for_blocks(job_pool* pool, size_t count, size_t floats, const Body& body) {
  if (pool == nullptr || floats < parallel_floats || count < 2 * blocks_per_claim) {
    for (size_t k = 0; k < count; ++k) body(k);
    return;
  }
  struct shared {
    std::atomic<size_t> next{0};
    std::mutex mu;
    std::condition_variable cv;
    size_t done = 0;
    size_t count = 0;
    const Body* body = nullptr;  // read only for claimed blocks: the caller waits for those
  };
  auto sh = std::make_shared<shared>();
  sh->count = count;
  sh->body = &body;
  auto work = [](shared& w) {
    for (;;) {
      const size_t k0 = w.next.fetch_add(blocks_per_claim);
      if (k0 >= w.count) return;
      const size_t k1 = std::min(w.count, k0 + blocks_per_claim);
      for (size_t k = k0; k < k1; ++k) (*w.body)(k);
      std::lock_guard<std::mutex> g(w.mu);
      w.done += k1 - k0;
      if (w.done == w.count) w.cv.notify_all();
    }
  };
  for (int t = 0; t < pool->threads(); ++t) pool->submit([sh, work] { work(*sh); });
  work(*sh);
  std::unique_lock<std::mutex> g(sh->mu);
  sh->cv.wait(g, [&] { return sh->done == sh->count; });
}

// Sum of squares of each counted input over `ranges`, as sum_squares takes it range by range.
std::vector<double> input_squares(span<const merge_input> inputs, const range_blocks& rb,
                                  job_pool* pool) {
  const auto& blocks = rb.blocks;
  std::vector<float> per_block(blocks.size() * inputs.size(), 0.0f);
  for_blocks(pool, blocks.size(), rb.floats * inputs.size(), [&](size_t k) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].weight == 0.0) continue;
      per_block[k * inputs.size() + i] =
          cvec_map(inputs[i].values.data() + blocks[k].begin, blocks[k].size).squaredNorm();
    }
  });
  std::vector<double> ss(inputs.size(), 0.0);
  for (size_t i = 0; i < inputs.size(); ++i) {
    double range_sum = 0.0;
    for (size_t k = 0; k < blocks.size(); ++k) {
      range_sum += static_cast<double>(per_block[k * inputs.size() + i]);
      if (k + 1 == blocks.size() || blocks[k + 1].range != blocks[k].range) {
        ss[i] += range_sum;
        range_sum = 0.0;
      }
    }
  }
  return ss;
}

// out[ranges] = sum_i coef[i] * inputs[i][ranges], block by block; returns sum of squares of
// the result (double), which is non-finite iff some counted input was. With `unit`, the same
// pass also adds to *unit_ss the squared norm of sum_i unit[i] * inputs[i] (mean_cosine's sum).
double combine(span<const merge_input> inputs, const std::vector<float>& coef,
               const range_blocks& rb, fspan out, job_pool* pool,
               const std::vector<float>* unit = nullptr, double* unit_ss = nullptr) {
  const auto& blocks = rb.blocks;
  std::vector<float> out_block(blocks.size()), unit_block_ss(blocks.size());
  for_blocks(pool, blocks.size(), rb.floats * inputs.size(), [&](size_t k) {
    const size_t b = blocks[k].begin, n = blocks[k].size;
    vec_map dst(out.data() + b, n);
    bool first = true;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (coef[i] == 0.0f) continue;
      cvec_map src(inputs[i].values.data() + b, n);
      if (first) {
        dst = coef[i] * src;
        first = false;
      } else {
        dst += coef[i] * src;
      }
    }
    if (first) dst.setZero();
    out_block[k] = dst.squaredNorm();
    if (unit != nullptr) {
      alignas(64) float acc_data[block_floats];
      vec_map acc(acc_data, n);
      acc.setZero();
      for (size_t i = 0; i < inputs.size(); ++i) {
        if ((*unit)[i] != 0.0f) acc += (*unit)[i] * cvec_map(inputs[i].values.data() + b, n);
      }
      unit_block_ss[k] = acc.squaredNorm();
    }
  });
  double out_ss = 0.0;
  for (size_t k = 0; k < blocks.size(); ++k) {
    out_ss += static_cast<double>(out_block[k]);
    if (unit != nullptr) *unit_ss += static_cast<double>(unit_block_ss[k]);
  }
  return out_ss;
}

void scale_ranges(fspan out, const range_blocks& rb, float factor, job_pool* pool) {
  const auto& blocks = rb.blocks;
  for_blocks(pool, blocks.size(), rb.floats,
             [&](size_t k) { vec_map(out.data() + blocks[k].begin, blocks[k].size) *= factor; });
}

}  // namespace

const char* to_string(merge_rule r) {
  switch (r) {
    case merge_rule::weighted_average:
      return "weighted";
    case merge_rule::rda:
      return "rda";
    case merge_rule::plain_average:
      return "plain";
  }
  return "?";
}

result<merge_rule> parse_merge_rule(const std::string& text) {
  if (text == "weighted") return merge_rule::weighted_average;
  if (text == "rda") return merge_rule::rda;
  if (text == "plain") return merge_rule::plain_average;
  return status(errc::invalid_argument,
                "merge rule '" + text + "': expected 'rda', 'weighted' or 'plain'");
}

double token_weight(uint64_t tokens, uint64_t steps) {
  if (steps == 0) return 0.0;
  const auto t = static_cast<double>(tokens);
  return t * t / static_cast<double>(steps);
}

namespace {

// The mean pairwise cosine from |sum_i u_i|^2 over m counted inputs, `unit_count` of them
// non-zero (u_i = v_i / |v_i|): the pairs' dot products sum to (|sum u|^2 - sum |u_i|^2) / 2.
float cosine_from(double unit_sum_ss, size_t unit_count, size_t m) {
  return static_cast<float>((unit_sum_ss - static_cast<double>(unit_count)) /
                            static_cast<double>(m * (m - 1)));
}

// merge(), and with `cosine` (RDA only, two or more counted inputs) the inputs' mean pairwise
// cosine, from the norms RDA takes and in its one pass over the inputs.
status merge_impl(merge_rule rule, span<const merge_input> inputs, const local_ranges& ranges,
                  fspan out, float* cosine, job_pool* pool) {
  double weight_sum = 0.0;
  size_t counted = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const double w = inputs[i].weight;
    if (!std::isfinite(w) || w < 0.0) return input_error(i, "weight must be finite and >= 0");
    if (inputs[i].values.size() != out.size()) {
      return status(errc::shape_mismatch, "merge input " + std::to_string(i) + ": " +
                                              std::to_string(inputs[i].values.size()) +
                                              " values, expected " + std::to_string(out.size()));
    }
    if (w > 0.0) {
      weight_sum += w;
      ++counted;
    }
  }
  if (counted == 0) return status(errc::invalid_argument, "merge: no input has positive weight");
  for (const auto& range : ranges) {
    DILOCO_CHECK(range.first <= range.second && range.second <= out.size(),
                 "merge: a tensor's range inside its fragment");
  }

  if (counted == 1) {
    // Every rule returns a single input unchanged; copy it exactly instead of computing.
    size_t only = 0;
    while (inputs[only].weight == 0.0) ++only;
    for (const auto& [b, e] : ranges) {
      std::copy(inputs[only].values.data() + b, inputs[only].values.data() + e, out.data() + b);
      if (!std::isfinite(sum_squares(cfspan(out.data() + b, e - b))))
        return input_error(only, "contains NaN or Inf");
    }
    return {};
  }

  // The ranges cut into blocks once, for every pass below.
  const range_blocks blocks = blocks_of(ranges);
  std::vector<float> coef(inputs.size(), 0.0f), unit(inputs.size(), 0.0f);
  size_t unit_count = 0;
  double radius = 0.0;
  switch (rule) {
    case merge_rule::weighted_average:
      for (size_t i = 0; i < inputs.size(); ++i)
        coef[i] = static_cast<float>(inputs[i].weight / weight_sum);
      break;
    case merge_rule::plain_average:
      for (size_t i = 0; i < inputs.size(); ++i) {
        coef[i] = inputs[i].weight > 0.0 ? 1.0f / static_cast<float>(counted) : 0.0f;
      }
      break;
    case merge_rule::rda: {
      const std::vector<double> squares = input_squares(inputs, blocks, pool);
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (inputs[i].weight == 0.0) continue;
        const double ss = squares[i];
        if (!std::isfinite(ss)) return input_error(i, "contains NaN or Inf");
        const double norm = std::sqrt(ss);
        radius += inputs[i].weight * norm;
        // phi(0) is taken as 0: a zero input adds to the radius but has no direction.
        coef[i] = norm > 0.0 ? static_cast<float>(inputs[i].weight / norm) : 0.0f;
        unit[i] = norm > 0.0 ? static_cast<float>(1.0 / norm) : 0.0f;
        unit_count += norm > 0.0 ? 1 : 0;
      }
      radius /= weight_sum;
      break;
    }
  }

  const bool agreement = cosine != nullptr && rule == merge_rule::rda;
  double unit_ss = 0.0;
  const double out_ss =
      combine(inputs, coef, blocks, out, pool, agreement ? &unit : nullptr, &unit_ss);
  if (!std::isfinite(out_ss)) return find_non_finite(inputs, ranges);
  if (agreement) *cosine = cosine_from(unit_ss, unit_count, counted);
  if (rule == merge_rule::rda) {
    const double dir_norm = std::sqrt(out_ss);
    scale_ranges(out, blocks, dir_norm > 0.0 ? static_cast<float>(radius / dir_norm) : 0.0f, pool);
  }
  return {};
}

}  // namespace

status merge(merge_rule rule, span<const merge_input> inputs, const local_ranges& ranges,
             fspan out) {
  return merge_impl(rule, inputs, ranges, out, nullptr, nullptr);
}

namespace {

// The mean cosine between the counted inputs over `ranges`, all pairs (a zero input counts 0).
// With u_i = v_i / |v_i|, the pairs' dot products sum to (|sum u_i|^2 - sum |u_i|^2) / 2, so one
// pass over the inputs (block by block, like the merge itself) gives all of them, not one per
// pair.
float mean_cosine(span<const merge_input> inputs, const local_ranges& ranges) {
  std::vector<size_t> counted;
  std::vector<float> inverse_norm;
  double unit_ss = 0.0;  // sum |u_i|^2: 1 per non-zero input
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].weight <= 0.0) continue;
    double ss = 0.0;
    for (const auto& [b, e] : ranges) ss += sum_squares(inputs[i].values.subspan(b, e - b));
    counted.push_back(i);
    inverse_norm.push_back(ss > 0.0 ? static_cast<float>(1.0 / std::sqrt(ss)) : 0.0f);
    unit_ss += ss > 0.0 ? 1.0 : 0.0;
  }
  const size_t m = counted.size();
  if (m < 2) return 0.0f;
  std::vector<float> block(block_floats);
  double sum_ss = 0.0;  // |sum u_i|^2
  for (const auto& [range_begin, range_end] : ranges) {
    for (size_t b = range_begin; b < range_end; b += block_floats) {
      const size_t n = std::min(block_floats, range_end - b);
      vec_map acc(block.data(), n);
      acc = inverse_norm[0] * cvec_map(inputs[counted[0]].values.data() + b, n);
      for (size_t k = 1; k < m; ++k)
        acc += inverse_norm[k] * cvec_map(inputs[counted[k]].values.data() + b, n);
      sum_ss += static_cast<double>(acc.squaredNorm());
    }
  }
  return cosine_from(sum_ss, static_cast<size_t>(unit_ss), m);
}

}  // namespace

status merge_fragment(const fragment& frag, merge_rule rule, span<const merge_input> inputs,
                      fspan out, std::vector<tensor_agreement>* agreement, job_pool* pool) {
  DILOCO_CHECK(out.size() == frag.size, "merge: the output as large as the fragment");
  const local_ranges embedding = frag.local_ranges(true);
  if (!embedding.empty()) {
    if (auto st = merge(merge_rule::weighted_average, inputs, embedding, out); !st.ok()) return st;
  }
  const auto tensors = frag.tensor_ranges();
  size_t counted = 0;
  for (const auto& in : inputs) counted += in.weight > 0.0 ? 1 : 0;
  const bool measure = agreement != nullptr && counted >= 2;
  if (agreement != nullptr) agreement->clear();
  if (rule == merge_rule::rda) {
    // RDA per tensor; its pass over the inputs also gives the tensor's cosine.
    for (const auto& [tensor, ranges] : tensors) {
      float cosine = 0.0f;
      if (auto st = merge_impl(rule, inputs, ranges, out, measure ? &cosine : nullptr, pool);
          !st.ok())
        return st;
      if (measure) agreement->push_back({tensor, cosine});
    }
    return {};
  }
  // The averages are elementwise: one pass over the whole body.
  const local_ranges body = frag.local_ranges(false);
  if (!body.empty()) {
    if (auto st = merge_impl(rule, inputs, body, out, nullptr, pool); !st.ok()) return st;
  }
  // The averages take no norms: the cosines take their own pass.
  if (measure) {
    for (const auto& [tensor, ranges] : tensors)
      agreement->push_back({tensor, mean_cosine(inputs, ranges)});
  }
  return {};
}

}  // namespace diloco
