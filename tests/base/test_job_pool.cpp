#include "tests/catch.hpp"

#include <atomic>
#include <memory>
#include <stdexcept>
#include <vector>

#include "base/job_pool.hpp"

using diloco::job_pool;

namespace {

// Notes when it is destroyed: stands for whatever a job captured.
struct capture {
  std::atomic<bool>* gone;
  explicit capture(std::atomic<bool>* g) : gone(g) {}
  ~capture() { gone->store(true); }
};

}  // namespace

TEST_CASE("job pool: results and exceptions come back through the futures") {
  job_pool pool(2);
  std::vector<std::future<int>> results;
  for (int i = 0; i < 50; ++i) results.push_back(pool.submit([i] { return i * i; }));
  for (int i = 0; i < 50; ++i) CHECK(results[static_cast<size_t>(i)].get() == i * i);

  auto fails = pool.submit([]() -> int { throw std::runtime_error("job failed"); });
  CHECK_THROWS_WITH(fails.get(), "job failed");

  std::atomic<int> ran{0};
  auto nothing = pool.submit([&ran] { ran.fetch_add(1); });
  nothing.get();
  CHECK(ran.load() == 1);
}

TEST_CASE("job pool: what a job captured is gone once its future is ready") {
  job_pool pool(2);
  for (int i = 0; i < 200; ++i) {
    std::atomic<bool> gone{false};
    auto held = std::make_shared<capture>(&gone);
    auto f = pool.submit([held] { return 1; });
    held.reset();  // the job's copy is the last
    REQUIRE(f.get() == 1);
    REQUIRE(gone.load());  // destroyed on the worker before the result was set
  }
  std::atomic<bool> gone{false};
  auto held = std::make_shared<capture>(&gone);
  auto throws = pool.submit([held]() -> int { throw std::runtime_error("x"); });
  held.reset();
  CHECK_THROWS(throws.get());
  CHECK(gone.load());
}

TEST_CASE("job pool: a job may hold the last reference to its own pool") {
  // The caller waits for the result, then drops its reference: the pool is destroyed here,
  // never on a worker (which would have to join itself).
  for (int i = 0; i < 50; ++i) {
    auto pool = std::make_shared<job_pool>(2);
    auto f = pool->submit([pool] { return pool->threads(); });
    CHECK(f.get() == 2);
    pool.reset();
  }
}

TEST_CASE("job pool: jobs queued when the pool is destroyed still run") {
  std::atomic<int> ran{0};
  {
    job_pool pool(1);
    for (int i = 0; i < 20; ++i) pool.submit([&ran] { ran.fetch_add(1); });
  }
  CHECK(ran.load() == 20);
}
