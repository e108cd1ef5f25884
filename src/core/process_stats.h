// What this process holds right now, from /proc/self: the figures a leak shows up in first
// (resident memory, open descriptors, threads). /metrics exports them under the names
// Prometheus' own clients use, so a soak or a dashboard reads them from outside.
#pragma once

#include <cstdint>

namespace ferry {

struct ProcessStats {
    bool ok = false;             // false off Linux or when /proc cannot be read
    int64_t resident_bytes = 0;  // VmRSS
    int64_t virtual_bytes = 0;   // VmSize
    int64_t open_fds = 0;
    int64_t max_fds = 0;  // the soft RLIMIT_NOFILE
    int64_t threads = 0;
    double cpu_seconds = 0;      // user + system
    double start_time_unix = 0;  // seconds since the epoch
};

ProcessStats read_process_stats();

}  // namespace ferry
