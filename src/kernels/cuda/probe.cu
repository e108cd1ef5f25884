// The roofline's two ceilings measured on the device, as the CPU backend measures its own: a
// read of device memory far larger than the L2 cache, and independent chains of FMAs on every
// multiprocessor. Timed with events, the best of a few passes.
#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace ferry::kernels::cuda {
namespace {

__global__ void read_k(const uint4* p, int64_t n, unsigned* sink) {
    unsigned acc = 0;
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
         i += int64_t{gridDim.x} * blockDim.x) {
        const uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads; practically never stores
}

constexpr int kChains = 8, kIters = 4096;

__global__ void fma_k(float* sink, float seed) {
    float a[kChains];
    for (int c = 0; c < kChains; ++c) a[c] = seed + static_cast<float>(threadIdx.x + c);
    for (int i = 0; i < kIters; ++i)
#pragma unroll
        for (int c = 0; c < kChains; ++c) a[c] = fmaf(a[c], 0.999999f, 1e-7f);
    float s = 0;
    for (int c = 0; c < kChains; ++c) s += a[c];
    if (s == 12345.0f) *sink = s;
}

// Milliseconds of the best of `passes` runs of f.
template <class F>
float best_ms(int passes, F f) {
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    float best = 1e30f;
    for (int i = 0; i < passes; ++i) {
        check(cudaEventRecord(a), "cudaEventRecord");
        f();
        check(cudaEventRecord(b), "cudaEventRecord");
        check(cudaEventSynchronize(b), "cudaEventSynchronize");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
        best = std::min(best, ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return best;
}

int sm_count() {
    int dev = 0, sms = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
          "cudaDeviceGetAttribute");
    return sms;
}

}  // namespace

double read_bandwidth_gbs(size_t bytes) {
    bytes = bytes / 16 * 16;
    void* buf = nullptr;
    unsigned* sink = nullptr;
    check(cudaMalloc(&buf, bytes), "cudaMalloc (bandwidth probe)");
    check(cudaMalloc(&sink, sizeof(unsigned)), "cudaMalloc");
    check(cudaMemset(buf, 1, bytes), "cudaMemset");
    const int64_t n = static_cast<int64_t>(bytes / 16);
    const unsigned grid = static_cast<unsigned>(sm_count() * 8);
    const float ms = best_ms(5, [&] {
        read_k<<<grid, 512>>>(static_cast<const uint4*>(buf), n, sink);
        check_launch("bandwidth probe");
    });
    cudaFree(buf);
    cudaFree(sink);
    return static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

double peak_gflops_f32() {
    float* sink = nullptr;
    check(cudaMalloc(&sink, sizeof(float)), "cudaMalloc");
    const unsigned grid = static_cast<unsigned>(sm_count() * 16);
    const int threads = 256;
    const float ms = best_ms(3, [&] {
        fma_k<<<grid, threads>>>(sink, 1.0f);
        check_launch("FMA probe");
    });
    cudaFree(sink);
    const double flops = 2.0 * kChains * kIters * static_cast<double>(grid) * threads;
    return flops / (ms * 1e-3) / 1e9;
}

}  // namespace ferry::kernels::cuda
