// read_process_stats against what the test itself does to the process: descriptors it opens,
// a thread it starts, memory it touches.
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/process_stats.h"

namespace ferry {
namespace {

TEST(ProcessStats, CountsDescriptorsThreadsAndMemory) {
    const ProcessStats before = read_process_stats();
    ASSERT_TRUE(before.ok);
    EXPECT_GT(before.max_fds, 0);
    EXPECT_GE(before.threads, 1);
    EXPECT_GE(before.cpu_seconds, 0.0);
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    EXPECT_LE(before.start_time_unix, now + 1);
    EXPECT_GT(before.start_time_unix, now - 24 * 3600);

    std::vector<int> fds;
    for (int i = 0; i < 5; ++i) fds.push_back(open("/dev/null", O_RDONLY));
    std::atomic<bool> stop{false};
    std::thread t([&] {
        while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    // 64 MiB, every page written so it is resident.
    std::vector<char> big(64 << 20);
    std::memset(big.data(), 1, big.size());

    const ProcessStats during = read_process_stats();
    EXPECT_EQ(during.open_fds, before.open_fds + 5);
    EXPECT_EQ(during.threads, before.threads + 1);
    EXPECT_GE(during.resident_bytes - before.resident_bytes, int64_t(60) << 20);
    EXPECT_GE(during.virtual_bytes, during.resident_bytes);

    stop = true;
    t.join();
    // 0.3 s of CPU by the kernel's other clock shows in the CPU time (ticks are 10 ms).
    auto cpu_clock = [] {
        timespec ts{};
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
    };
    const double c0 = cpu_clock(), s0 = read_process_stats().cpu_seconds;
    volatile uint64_t x = 0;
    while (cpu_clock() - c0 < 0.3) x = x + 1;
    EXPECT_NEAR(read_process_stats().cpu_seconds - s0, cpu_clock() - c0, 0.05);
    for (int fd : fds) close(fd);
    EXPECT_EQ(read_process_stats().open_fds, before.open_fds);
    EXPECT_EQ(big[12345], 1);
}

}  // namespace
}  // namespace ferry
