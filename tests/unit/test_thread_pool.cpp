#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "core/thread_pool.h"

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
    for (int threads : {1, 2, 3, 8}) {
        ferry::ThreadPool pool(threads);
        for (int64_t n : {0, 1, 5, 16, 17, 1000}) {
            std::vector<std::atomic<int>> hits(n);
            for (int rep = 0; rep < 20; ++rep)
                pool.parallel_for(
                    n,
                    [&](int64_t b, int64_t e) {
                        for (int64_t i = b; i < e; ++i) hits[i]++;
                    },
                    4);
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 20) << threads << " " << n;
        }
    }
}

TEST(ThreadPool, ChunksRespectGrain) {
    ferry::ThreadPool pool(3);
    std::atomic<int> bad{0};
    pool.parallel_for(
        100,
        [&](int64_t b, int64_t e) {
            if (b % 16 != 0 || (e % 16 != 0 && e != 100)) bad++;
        },
        16);
    EXPECT_EQ(bad.load(), 0);
}

TEST(ThreadPool, RunGivesEachThreadItsIndex) {
    ferry::ThreadPool pool(4);
    std::vector<std::atomic<int>> seen(4);
    for (int i = 0; i < 1000; ++i)
        pool.run([&](int t, int n) {
            ASSERT_EQ(n, 4);
            seen[t]++;
        });
    for (auto& s : seen) EXPECT_EQ(s.load(), 1000);
}

TEST(ThreadPool, PhysicalCoresPositive) {
    EXPECT_GE(ferry::physical_core_count(), 1);
}
