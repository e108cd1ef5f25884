// Measures what this machine can do: sustained memory read bandwidth and peak f32 FMA
// throughput. `ferry plan --device cpu` uses them as the roofline's ceilings, and `ferry bench`
// compares achieved figures against them. Each measurement takes well under a second.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry {

struct MachinePeaks {
    double read_gbs = 0;        // GB/s (1e9 bytes/s) reading a buffer far larger than the caches
    double gflops_f32 = 0;      // f32 GFLOP/s of independent FMA chains (an FMA counts 2 FLOPs)
    uint64_t memory_bytes = 0;  // MemTotal
    int threads = 0;
};

// Streams through `buffer_bytes` (0 = pick: 4 x the last-level cache, 256 to 512 MiB, at
// most an eighth of RAM) on `n_threads` threads (0 = all hardware threads) and returns the best
// of several passes.
double measure_read_bandwidth_gbs(int n_threads = 0, size_t buffer_bytes = 0);

// Runs register-resident FMA chains on every thread with the widest vector unit this CPU has
// (AVX-512, AVX2+FMA, or portable code) and returns the best of a few passes.
double measure_peak_gflops_f32(int n_threads = 0);

// Physical memory as the OS reports it (MemTotal on Linux); 0 if unknown.
uint64_t total_memory_bytes();

// Both measurements plus MemTotal.
MachinePeaks measure_machine_peaks(int n_threads = 0);

}  // namespace ferry
