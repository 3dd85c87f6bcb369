// Independent jobs on several threads, for commands whose runs do not talk to each other
// (`diloco chaos`'s cells). Each job writes only its own slot of the caller's results, so the
// results, and everything printed from them, are the same for any number of threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

#include "base/check.hpp"

namespace diloco {

// The machine's cores (at least 1): the default of --threads.
inline int machine_threads() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Runs job(i) for every i in [0, n) on up to `threads` threads (the caller's among them), in
// no particular order; `done(k)` is called on the caller's thread as jobs finish (k of n
// done), for a progress line. Returns when all have run.
inline void parallel_jobs(size_t n, int threads, const std::function<void(size_t)>& job,
                          const std::function<void(size_t)>& done = nullptr) {
  DILOCO_CHECK(threads >= 1, "parallel_jobs: at least one thread");
  std::atomic<size_t> next{0}, finished{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      job(i);
      finished.fetch_add(1);
    }
  };
  const size_t helpers = std::min<size_t>(n, static_cast<size_t>(threads)) - (n > 0 ? 1 : 0);
  std::vector<std::thread> pool;
  for (size_t k = 0; k < helpers; ++k) pool.emplace_back(work);
  if (!done) {
    work();
  } else {
    // The caller reports progress between its own jobs.
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      job(i);
      finished.fetch_add(1);
      done(finished.load());
    }
  }
  for (auto& t : pool) t.join();
  if (done) done(finished.load());
}

}  // namespace diloco
