// Timing helpers for the bench/ programs. Benchmarks report ratios against a baseline measured
// in the same run, because absolute figures on shared machines drift from run to run.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace diloco::bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median wall time of `reps` runs of fn (after one warm-up run), in seconds.
template <class F>
double median_time_s(int reps, F&& fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const double start = now_s();
    fn();
    t.push_back(now_s() - start);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Keeps the optimizer from deleting work whose result is unused.
template <class T>
inline void do_not_optimize(const T& value) {
  asm volatile("" : : "r,m"(value) : "memory");
}

}  // namespace diloco::bench
