#include "core/thread_pool.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace ferry {
namespace {
constexpr int kSpinIterations = 20000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mu_);
        stop_.store(true);
        epoch_.fetch_add(2);
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
}

// Claims and runs tasks of the open loop until none are left.
void ThreadPool::drain() {
    for (;;) {
        const int64_t t = next_task_.fetch_add(1, std::memory_order_relaxed);
        if (t >= n_tasks_) return;
        (*job_)(t);
        done_tasks_.fetch_add(1, std::memory_order_release);
    }
}

void ThreadPool::run_tasks(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
    if (n_tasks <= 0) return;
    if (n_threads_ == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; ++t) fn(t);
        return;
    }
    job_ = &fn;
    n_tasks_ = n_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    done_tasks_.store(0, std::memory_order_relaxed);
    {
        // Under the lock so a worker between its last check and cv_.wait cannot miss it.
        std::lock_guard lock(mu_);
        epoch_.fetch_add(1, std::memory_order_seq_cst);  // odd -> even: open
    }
    cv_.notify_all();
    drain();
    while (done_tasks_.load(std::memory_order_acquire) != n_tasks) cpu_relax();
    // Close the loop, then wait for workers that joined it to leave; one that joins after
    // the close sees it and never touches job_.
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    while (active_.load(std::memory_order_seq_cst) != 0) cpu_relax();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
    const int n = n_threads_;
    run_tasks(n, [&](int64_t t) { fn(static_cast<int>(t), n); });
}

void ThreadPool::worker() {
    uint64_t seen = epoch_.load();
    for (;;) {
        // Spin first: the next loop of a forward pass usually arrives within microseconds.
        uint64_t e = epoch_.load(std::memory_order_acquire);
        for (int spins = 0; (e == seen || (e & 1)) && spins < kSpinIterations; ++spins) {
            cpu_relax();
            e = epoch_.load(std::memory_order_acquire);
        }
        if (e == seen || (e & 1)) {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [&] {
                const uint64_t x = epoch_.load();
                return stop_.load() || (x != seen && !(x & 1));
            });
            e = epoch_.load();
        }
        if (stop_.load()) return;
        if (e & 1) continue;  // that loop closed while we woke; wait for the next
        seen = e;
        active_.fetch_add(1, std::memory_order_seq_cst);
        if (epoch_.load(std::memory_order_seq_cst) == e) drain();
        active_.fetch_sub(1, std::memory_order_seq_cst);
    }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain) {
    if (n <= 0) return;
    grain = std::max<int64_t>(1, grain);
    const int64_t n_chunks = (n + grain - 1) / grain;
    const int used = static_cast<int>(std::min<int64_t>(n_threads_, n_chunks));
    if (used == 1) {
        fn(0, n);
        return;
    }
    run_tasks(used, [&](int64_t t) {
        const int64_t begin = std::min(n, (n_chunks * t / used) * grain);
        const int64_t end = std::min(n, (n_chunks * (t + 1) / used) * grain);
        if (begin < end) fn(begin, end);
    });
}

int physical_core_count() {
    // Distinct (physical id, core id) pairs; falls back to the logical count.
    std::ifstream in("/proc/cpuinfo");
    std::set<std::pair<std::string, std::string>> cores;
    std::string line, phys = "0";
    while (std::getline(in, line)) {
        auto value = [&] { return line.substr(line.find(':') + 1); };
        if (line.rfind("physical id", 0) == 0) phys = value();
        if (line.rfind("core id", 0) == 0) cores.emplace(phys, value());
    }
    int n = static_cast<int>(cores.size());
    if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
    return std::max(1, n);
}

}  // namespace ferry
