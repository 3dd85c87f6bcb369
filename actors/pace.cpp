#include "actors/pace.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "base/check.hpp"

namespace diloco {

namespace {

template <class T>
T median_of(std::vector<T> v) {
  DILOCO_CHECK(!v.empty(), "pace: a median of something");
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  return v[mid];
}

}  // namespace

int64_t transfer_ns(int64_t arrived_ns, int64_t sent_ns, int64_t previous_ns, int64_t latency_ns) {
  const int64_t started = std::max(sent_ns, previous_ns - latency_ns);
  return std::max<int64_t>(1, arrived_ns - latency_ns - started);
}

link_estimate estimate_links(const std::deque<link_sample>& samples,
                             const std::vector<uint32_t>& fragments_of_shard) {
  link_estimate e;
  std::vector<double> bandwidths;
  std::vector<int64_t> hints;
  for (const auto& s : samples) {
    if (s.up_ns > 0) bandwidths.push_back(static_cast<double>(s.up_bytes) * 8.0 / s.up_ns);
    if (s.down_ns > 0) bandwidths.push_back(static_cast<double>(s.down_bytes) * 8.0 / s.down_ns);
    if (s.latency_ns > 0) hints.push_back(s.latency_ns);
  }
  if (bandwidths.empty()) return e;
  e.bits_per_ns = median_of(bandwidths);
  // A link that slows down shows first in the newest round: taken at once when it is slower
  // (a queue is cheap to avoid and dear to drain), while a faster one waits for the median.
  const auto& newest = samples.back();
  if (newest.up_ns > 0 && newest.down_ns > 0) {
    const double now = static_cast<double>(newest.up_bytes + newest.down_bytes) * 8.0 /
                       static_cast<double>(newest.up_ns + newest.down_ns);
    e.bits_per_ns = std::min(e.bits_per_ns, now);
  }
  if (!(e.bits_per_ns > 0) || !std::isfinite(e.bits_per_ns)) return link_estimate{};
  if (!hints.empty()) e.latency_ns = median_of(hints);
  // Per fragment: its smallest sizes each way per round, and its smallest round (one version
  // back).
  struct per_fragment {
    uint32_t shard = 0;
    uint64_t up = UINT64_MAX, down = UINT64_MAX, round = UINT64_MAX;
  };
  std::map<uint32_t, per_fragment> frag;
  for (const auto& s : samples) {
    auto& f = frag[s.fragment];
    f.shard = s.shard;
    const uint64_t one = s.down_bytes / std::max<uint32_t>(1, s.down_versions);
    f.up = std::min(f.up, s.up_bytes);
    f.down = std::min(f.down, one * std::max<uint32_t>(1, s.new_versions));
    f.round = std::min(f.round, s.up_bytes + one);
  }
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> per_shard;  // up, down
  std::map<uint32_t, uint32_t> seen;
  uint64_t round_bytes = 0;
  for (const auto& [p, f] : frag) {
    per_shard[f.shard].first += f.up;
    per_shard[f.shard].second += f.down;
    seen[f.shard] += 1;
    round_bytes = std::max(round_bytes, f.round);
  }
  for (const auto& [shard, bytes] : per_shard) {
    const uint32_t owned = shard < fragments_of_shard.size() ? fragments_of_shard[shard] : 0;
    const double scale = static_cast<double>(std::max(owned, seen[shard])) / seen[shard];
    const auto most = static_cast<double>(std::max(bytes.first, bytes.second));
    e.period_bytes = std::max(e.period_bytes, static_cast<uint64_t>(std::ceil(most * scale)));
  }
  e.round_ns = 2 * e.latency_ns +
               static_cast<int64_t>(static_cast<double>(round_bytes) * 8.0 / e.bits_per_ns);
  e.ok = true;
  return e;
}

link_estimate keep_round(std::deque<link_sample>& samples, const link_sample& s,
                         const std::vector<uint32_t>& shard_of, size_t shards) {
  samples.push_back(s);
  const size_t keep = shard_of.size();
  while (samples.size() > keep) samples.pop_front();
  if (samples.size() < (shard_of.size() + 1) / 2) return {};
  std::vector<uint32_t> owned(shards, 0);
  for (uint32_t shard : shard_of) {
    DILOCO_CHECK(shard < shards, "pace: a fragment's shard is one of the run's");
    owned[shard] += 1;
  }
  return estimate_links(samples, owned);
}

pace_need needed(const link_estimate& e, int64_t step_ns, double target_load) {
  DILOCO_CHECK(step_ns > 0 && target_load > 0, "pace: a step and a load to fit in");
  if (!e.ok) return {};
  const double room = target_load * static_cast<double>(step_ns);
  pace_need n;
  n.overlap = static_cast<double>(e.round_ns) / room;
  const double busy_ns = static_cast<double>(e.period_bytes) * 8.0 / e.bits_per_ns;
  n.period = std::max(busy_ns / room, std::ceil(n.overlap) + 1.0);
  return n;
}

namespace {

// Up at once to the need, down only past the margin, within [lo, hi].
uint32_t follow(uint32_t current, double need, uint32_t lo, uint32_t hi, double down_share) {
  const double want =
      std::min(static_cast<double>(hi), std::max(static_cast<double>(lo), std::ceil(need)));
  const auto target = static_cast<uint32_t>(want);
  if (target > current) return target;
  if (static_cast<double>(target) < down_share * static_cast<double>(current)) return target;
  return std::clamp(current, lo, hi);
}

}  // namespace

pace_choice choose_pace(pace_choice current, pace_need need, const pace_bounds& b,
                        double down_share) {
  DILOCO_CHECK(b.period_lo >= 1 && b.period_lo <= b.period_hi && b.overlap_lo < b.period_lo,
               "pace: a range of periods above the overlap");
  pace_choice next;
  next.overlap = follow(current.overlap, need.overlap, b.overlap_lo, b.period_hi - 1, down_share);
  next.period = follow(current.period, std::max(need.period, next.overlap + 1.0), b.period_lo,
                       b.period_hi, down_share);
  next.period = std::max(next.period, next.overlap + 1);
  return next;
}

}  // namespace diloco
