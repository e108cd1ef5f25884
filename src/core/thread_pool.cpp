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
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mu_);
        stop_.store(true);
        generation_.fetch_add(1);
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    {
        std::lock_guard lock(mu_);
        job_ = &fn;
        pending_.store(n_threads_ - 1);
        generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    fn(0, n_threads_);
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
        if (spins < kSpinIterations)
            cpu_relax();
        else
            std::this_thread::yield();
    }
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        // Spin first: the next loop of a forward pass usually arrives within microseconds.
        int spins = 0;
        while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinIterations) {
            cpu_relax();
            ++spins;
        }
        if (generation_.load(std::memory_order_acquire) == seen) {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [&] { return generation_.load() != seen; });
        }
        seen = generation_.load(std::memory_order_acquire);
        if (stop_.load()) return;
        const std::function<void(int, int)>* job;
        {
            std::lock_guard lock(mu_);
            job = job_;
        }
        (*job)(index, n_threads_);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
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
    run([&](int t, int) {
        if (t >= used) return;
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
