// A persistent pool of worker threads. Decode runs hundreds of small parallel loops per token,
// so threads are created once and woken per loop: spinning briefly before sleeping keeps the
// wake-up cost to well under a microsecond when loops come back to back.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry {

class ThreadPool {
  public:
    // n_threads counts the calling thread: a pool of 1 runs everything inline.
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Calls fn(thread_index, n_threads) once on every thread and returns when all are done.
    void run(const std::function<void(int, int)>& fn);

    // Splits [0, n) into contiguous chunks, a multiple of `grain` long, one per thread.
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                      int64_t grain = 1);

  private:
    void worker(int index);

    int n_threads_;
    std::vector<std::thread> threads_;
    const std::function<void(int, int)>* job_ = nullptr;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stop_{false};
    std::mutex mu_;
    std::condition_variable cv_;
};

// Physical cores of this machine (hyper-threads not counted); at least 1.
int physical_core_count();

}  // namespace ferry
