// Measures what this machine can do: sustained memory read bandwidth and peak f32 FMA
// throughput, the CPU backend's roofline ceilings (`ferry plan --device cpu`, `ferry bench`).
// Each measurement takes well under a second.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::kernels::cpu {

// Streams through `buffer_bytes` (0 = pick: 4 x the last-level cache, 256 to 512 MiB, at
// most an eighth of RAM) on `n_threads` threads (0 = all hardware threads) and returns the best
// of several passes.
double measure_read_bandwidth_gbs(int n_threads = 0, size_t buffer_bytes = 0);

// Runs register-resident FMA chains on every thread with the widest vector unit of the levels
// ferry's kernels run at on this CPU (AVX-512, AVX2+FMA, or portable code) and returns the best
// of a few passes.
double measure_peak_gflops_f32(int n_threads = 0);

// Physical memory as the OS reports it (MemTotal on Linux); 0 if unknown.
uint64_t total_memory_bytes();
// MemAvailable: what the kernel could give this process now without swapping (0: unknown).
uint64_t available_memory_bytes();

}  // namespace ferry::kernels::cpu
