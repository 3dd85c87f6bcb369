// A fixed set of worker threads running submitted jobs in the order they came. Results come
// back as futures; a job's exception is rethrown by the future's get(). Used to compute ahead
// (a learner's next inner step, docs/architecture.md "Parallel simulation"): what a job
// computes must not depend on which thread runs it or when.
#pragma once

#include <cassert>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace diloco {

class job_pool {
 public:
  explicit job_pool(int threads) {
    assert(threads >= 1);
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~job_pool() {
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
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(f));
    std::future<R> result = task->get_future();
    {
      std::lock_guard<std::mutex> g(mu_);
      assert(!stopping_);
      jobs_.emplace_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return result;
  }

 private:
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
