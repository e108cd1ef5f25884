#include "kernels/cpu/machine_probe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "core/huge_buffer.h"
#include "kernels/cpu/dispatch.h"

#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry::kernels::cpu {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

int resolve_threads(int n) {
    if (n > 0) return n;
    return std::max(1u, std::thread::hardware_concurrency());
}

// Runs fn(i) on n threads and waits for all; thread start-up (tens of microseconds) is
// negligible next to the multi-millisecond passes timed around it.
template <class Fn>
void on_threads(int n, Fn fn) {
    std::vector<std::thread> ts;
    ts.reserve(n - 1);
    for (int i = 1; i < n; ++i) ts.emplace_back(fn, i);
    fn(0);
    for (auto& t : ts) t.join();
}

std::atomic<uint64_t> g_sink{0};  // keeps the compiler from dropping the loops below

// --- read bandwidth ---------------------------------------------------------------------------

uint64_t sum_portable(const uint64_t* p, size_t n) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) a += p[i], b += p[i + 1], c += p[i + 2], d += p[i + 3];
    return a ^ b ^ c ^ d;
}

#if defined(__x86_64__)
// Wide loads matter: with 16-byte SSE2 loads a single core can be instruction-bound below
// the memory system's limit on some parts, and the point is to measure the memory.
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint64_t* p, size_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    const __m256i* v = reinterpret_cast<const __m256i*>(p);
    for (size_t i = 0; i + 16 <= n; i += 16, v += 4) {
        a = _mm256_add_epi64(a, _mm256_load_si256(v));
        b = _mm256_add_epi64(b, _mm256_load_si256(v + 1));
        c = _mm256_add_epi64(c, _mm256_load_si256(v + 2));
        d = _mm256_add_epi64(d, _mm256_load_si256(v + 3));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    alignas(32) uint64_t out[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), a);
    return out[0] ^ out[1] ^ out[2] ^ out[3];
}
#endif

uint64_t sum_words(const uint64_t* p, size_t n) {
#if defined(__x86_64__)
    if (detected_cpu_level() >= CpuLevel::AVX2) return sum_avx2(p, n);
#endif
    return sum_portable(p, n);
}

size_t last_level_cache_bytes() {
    long llc = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE)
    llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    return llc > 0 ? static_cast<size_t>(llc) : 32u << 20;
}

// --- FMA throughput ---------------------------------------------------------------------------

// Every kernel runs kChains independent accumulators: FMA latency (4 cycles) times the FMA
// ports (2) needs at least 8 in flight to keep the units busy; 12 leaves margin.
constexpr int kChains = 12;
constexpr float kMul = 0.9999999f, kAdd = 1e-7f;  // stays finite and normal forever

#if defined(__x86_64__)
__attribute__((target("avx512f"))) double fma_avx512(int64_t iters) {
    __m512 acc[kChains];
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
    const __m512 m = _mm512_set1_ps(kMul), a = _mm512_set1_ps(kAdd);
    for (int64_t i = 0; i < iters; ++i)
        for (int j = 0; j < kChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, a);
    __m512 s = acc[0];
    for (int j = 1; j < kChains; ++j) s = _mm512_add_ps(s, acc[j]);
    alignas(64) float out[16];
    _mm512_store_ps(out, s);  // (_mm512_reduce_add_ps trips a false GCC 12 warning)
    g_sink += static_cast<uint64_t>(out[0]);
    return 2.0 * 16 * kChains * static_cast<double>(iters);
}

__attribute__((target("avx2,fma"))) double fma_avx2(int64_t iters) {
    __m256 acc[kChains];
    for (int j = 0; j < kChains; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
    const __m256 m = _mm256_set1_ps(kMul), a = _mm256_set1_ps(kAdd);
    for (int64_t i = 0; i < iters; ++i)
        for (int j = 0; j < kChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, a);
    __m256 s = acc[0];
    for (int j = 1; j < kChains; ++j) s = _mm256_add_ps(s, acc[j]);
    alignas(32) float out[8];
    _mm256_store_ps(out, s);
    g_sink += static_cast<uint64_t>(out[0]);
    return 2.0 * 8 * kChains * static_cast<double>(iters);
}
#endif

// Portable: the compiler vectorises the inner loop with whatever the baseline ISA offers
// (a separate multiply and add when FMA contraction is off; still 2 FLOPs per element).
double fma_portable(int64_t iters) {
    constexpr int kLanes = 8 * kChains;
    float acc[kLanes];
    for (int j = 0; j < kLanes; ++j) acc[j] = static_cast<float>(j);
    for (int64_t i = 0; i < iters; ++i)
        for (int j = 0; j < kLanes; ++j) acc[j] = acc[j] * kMul + kAdd;
    float s = 0;
    for (float v : acc) s += v;
    g_sink += static_cast<uint64_t>(s);
    return 2.0 * kLanes * static_cast<double>(iters);
}

using FmaKernel = double (*)(int64_t);

// The widest unit of the levels ferry's kernels can run at on this CPU (dispatch.h).
FmaKernel best_fma_kernel() {
#if defined(__x86_64__)
    if (detected_cpu_level() >= CpuLevel::AVX512) return fma_avx512;
    if (detected_cpu_level() == CpuLevel::AVX2) return fma_avx2;
#endif
    return fma_portable;
}

}  // namespace

double measure_read_bandwidth_gbs(int n_threads, size_t buffer_bytes) {
    const auto start = Clock::now();
    n_threads = resolve_threads(n_threads);
    if (buffer_bytes == 0) {
        // Far larger than the caches so the reads come from DRAM, but bounded so the first
        // touch (page faults) stays a fraction of a second.
        buffer_bytes = std::clamp<size_t>(4 * last_level_cache_bytes(), 256u << 20, 512u << 20);
        if (uint64_t ram = total_memory_bytes(); ram > 0)
            buffer_bytes = std::min<size_t>(buffer_bytes, ram / 8);
    }
    const size_t chunk_words = buffer_bytes / 8 / n_threads / 16 * 16;  // whole AVX2 strides
    const size_t words = chunk_words * n_threads;
    if (chunk_words == 0) return 0;
    // Huge pages, as the model's weights and KV pool have: fewer faults and TLB misses.
    HugeBuffer mem;
    try {
        mem = HugeBuffer(words * 8);
    } catch (const std::bad_alloc&) {
        return 0;
    }
    auto* buf = reinterpret_cast<uint64_t*>(mem.data());
    // Each thread touches its own chunk first, so pages land on its NUMA node.
    on_threads(n_threads,
               [&](int t) { std::memset(buf + t * chunk_words, t + 1, chunk_words * 8); });

    // Best of several passes, within about 0.7 s including the first touch above.
    double best = 0;
    for (int pass = 0; pass < 8; ++pass) {
        const auto t0 = Clock::now();
        on_threads(n_threads,
                   [&](int t) { g_sink += sum_words(buf + t * chunk_words, chunk_words); });
        const double s = seconds_since(t0);
        best = std::max(best, static_cast<double>(words * 8) / s / 1e9);
        if (pass >= 1 && seconds_since(start) > 0.7) break;
    }
    return best;
}

double measure_peak_gflops_f32(int n_threads) {
    n_threads = resolve_threads(n_threads);
    const FmaKernel kernel = best_fma_kernel();
    // Calibrate on one thread so each timed pass lasts about 60 ms whatever the CPU.
    int64_t iters = 1 << 16;
    for (;;) {
        const auto t0 = Clock::now();
        kernel(iters);
        const double s = seconds_since(t0);
        if (s > 0.01 || iters > (int64_t{1} << 34)) {
            iters = static_cast<int64_t>(static_cast<double>(iters) * 0.06 / std::max(s, 1e-6));
            break;
        }
        iters *= 4;
    }
    double best = 0;
    for (int pass = 0; pass < 3; ++pass) {
        std::vector<double> flops(n_threads);
        const auto t0 = Clock::now();
        on_threads(n_threads, [&](int t) { flops[t] = kernel(iters); });
        const double s = seconds_since(t0);
        double total = 0;
        for (double f : flops) total += f;
        best = std::max(best, total / s / 1e9);
    }
    return best;
}

namespace {
// A /proc/meminfo line's value in bytes ("MemTotal:"), 0 where there is none.
uint64_t meminfo_bytes(std::string_view want) {
    std::ifstream in("/proc/meminfo");
    std::string key;
    uint64_t kb = 0;
    while (in >> key >> kb) {
        if (key == want) return kb * 1024;
        in.ignore(256, '\n');
    }
    return 0;
}
}  // namespace

uint64_t available_memory_bytes() {
    return meminfo_bytes("MemAvailable:");
}

uint64_t total_memory_bytes() {
    if (const uint64_t b = meminfo_bytes("MemTotal:")) return b;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

}  // namespace ferry::kernels::cpu
