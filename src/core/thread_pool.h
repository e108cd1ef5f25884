// A persistent pool of worker threads. Decode runs hundreds of small parallel loops per token,
// so threads are created once and woken per loop: spinning briefly before sleeping keeps the
// wake-up cost to well under a microsecond when loops come back to back.
//
// Work is handed out as tasks claimed from an atomic counter, and the caller works too. A
// worker that has not woken yet (its core busy with another process) therefore never holds
// the caller at the barrier: whoever is running takes the remaining tasks, and the caller
// only waits for workers that actually joined the loop.
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

    // Calls fn(task) exactly once for every task in [0, n_tasks), spread over the threads,
    // and returns when all are done. Tasks may run on any thread, several on one.
    void run_tasks(int64_t n_tasks, const std::function<void(int64_t)>& fn);

    // Calls fn(index, n_threads) once for every index in [0, n_threads) and returns when all
    // are done (indices are shares of work, not OS threads: one thread may run several).
    void run(const std::function<void(int, int)>& fn);

    // Splits [0, n) into contiguous chunks, a multiple of `grain` long, one per thread.
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                      int64_t grain = 1);

  private:
    void worker();
    void drain();

    int n_threads_;
    std::vector<std::thread> threads_;
    const std::function<void(int64_t)>* job_ = nullptr;
    int64_t n_tasks_ = 0;
    std::atomic<int64_t> next_task_{0};
    std::atomic<int64_t> done_tasks_{0};
    // Even: a loop is open for joining; odd: closed. Bumped twice per loop.
    std::atomic<uint64_t> epoch_{1};
    std::atomic<int> active_{0};  // workers inside the open loop
    std::atomic<bool> stop_{false};
    std::mutex mu_;
    std::condition_variable cv_;
};

// Physical cores of this machine (hyper-threads not counted); at least 1.
int physical_core_count();

}  // namespace ferry
