// A fixed set of worker threads running submitted jobs in the order they came. Results come
// back as futures; a job's exception is rethrown by the future's get(). Used to compute ahead
// (a learner's next inner step, docs/architecture.md "Parallel simulation"): what a job
// computes must not depend on which thread runs it or when.
//
// A job's captures are destroyed on its worker before its future becomes ready, so whoever
// waits on the future may then drop the last reference to anything a job held, the pool
// included: no worker is ever left holding it (it would have to join itself).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

#include "base/check.hpp"

namespace diloco {

class job_pool {
 public:
  explicit job_pool(int threads) {
    DILOCO_CHECK(threads >= 1, "a job_pool with no threads");
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~job_pool() {
    for (const auto& w : workers_) {
      DILOCO_CHECK(w.get_id() != std::this_thread::get_id(), "a job_pool destroyed by its own job");
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  job_pool(const job_pool&) = delete;
  job_pool& operator=(const job_pool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()); }

  template <class F>
  auto submit(F&& f) -> std::future<decltype(f())> {
    using R = decltype(f());
    auto run = std::make_shared<pending<R, std::decay_t<F>>>(std::forward<F>(f));
    std::future<R> result = run->done.get_future();
    {
      std::lock_guard<std::mutex> g(mu_);
      DILOCO_CHECK(!stopping_, "job_pool: a job submitted while the pool stops");
      jobs_.emplace_back([run] { run->go(); });
    }
    cv_.notify_one();
    return result;
  }

 private:
  // A job and its promise: the job (with all it captured) is gone before the promise is kept.
  template <class R, class F>
  struct pending {
    explicit pending(F&& f) : job(std::move(f)) {}
    explicit pending(const F& f) : job(f) {}
    void go() {
      try {
        if constexpr (std::is_void_v<R>) {
          (*job)();
          job.reset();
          done.set_value();
        } else {
          R r = (*job)();
          job.reset();
          done.set_value(std::move(r));
        }
      } catch (...) {
        job.reset();
        done.set_exception(std::current_exception());
      }
    }
    std::optional<F> job;
    std::promise<R> done;
  };

  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, and nothing left
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace diloco
