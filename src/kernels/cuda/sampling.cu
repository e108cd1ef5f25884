// Sampling on the GPU: one block draws one row's token with sample_row.h's radix walk, the
// same code the CPU backend runs on one thread, so only token ids cross to the host. The block's
// combines go lane by lane through fixed shuffles, then warp by warp in order, so a seeded draw
// gives the same token every run.
#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/sample_row.h"

namespace ferry::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// sample_row.h's group: the block's threads.
struct Block {
    double* wd;    // [kWarps][16]
    int* wc;       // [kWarps][16]
    float* cl;     // [kListCap]: the compacted candidates' logits
    int32_t* cid;  // [kListCap]: and their ids
    __device__ int rank() const { return static_cast<int>(threadIdx.x); }
    __device__ int size() const { return kThreads; }
    __device__ void sync() const { __syncthreads(); }
    __device__ float* list_l() const { return cl; }
    __device__ int32_t* list_id() const { return cid; }

    __device__ int scan(int v, int* total) const {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        int x = v;  // inclusive within the warp
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o) x += y;
        }
        __syncthreads();
        if (lane == 31) wc[warp] = x;
        __syncthreads();
        int before = 0, all = 0;
        for (int w = 0; w < kWarps; ++w) {
            if (w < warp) before += wc[w];
            all += wc[w];
        }
        *total = all;
        return before + x - v;
    }

    __device__ void sum(double (&w)[16], int (&c)[16]) const {
#pragma unroll
        for (int b = 0; b < 16; ++b)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                w[b] += __shfl_xor_sync(0xffffffffu, w[b], o);
                c[b] += __shfl_xor_sync(0xffffffffu, c[b], o);
            }
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        __syncthreads();  // the last combine's readers are done with the scratch
        if (lane < 16) {
            // Lane b publishes bucket b (a constant index per unrolled step keeps w in registers).
#pragma unroll
            for (int b = 0; b < 16; ++b)
                if (lane == b) wd[warp * 16 + b] = w[b], wc[warp * 16 + b] = c[b];
        }
        __syncthreads();
#pragma unroll
        for (int b = 0; b < 16; ++b) {
            double sw = 0;
            int sc = 0;
            for (int v = 0; v < kWarps; ++v) sw += wd[v * 16 + b], sc += wc[v * 16 + b];
            w[b] = sw;
            c[b] = sc;
        }
    }
    __device__ double sum(double v) const {
        return combine(v, [](double a, double b) { return a + b; });
    }
    __device__ float max(float v) const {
        return combine(v, [](float a, float b) { return fmaxf(a, b); });
    }
    __device__ uint64_t max(uint64_t v) const {
        return combine(v, [](uint64_t a, uint64_t b) { return a > b ? a : b; });
    }

    // v combined over the block with op: across each warp by shuffles, then warp by warp in
    // order, every thread reading the same slots (so every thread gets the same bits).
    template <class T, class Op>
    __device__ T combine(T v, Op op) const {
        static_assert(sizeof(T) <= sizeof(double));
        for (int o = 16; o > 0; o >>= 1) v = op(v, shuffle_xor(v, o));
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        T* slot = reinterpret_cast<T*>(wd);
        __syncthreads();  // the last combine's readers are done with the scratch
        if (lane == 0) slot[warp] = v;
        __syncthreads();
        T r = slot[0];
        for (int w = 1; w < kWarps; ++w) r = op(r, slot[w]);
        return r;
    }
    template <class T>
    __device__ static T shuffle_xor(T v, int o) {
        if constexpr (sizeof(T) == 8 && !std::is_floating_point_v<T>)
            return static_cast<T>(
                __shfl_xor_sync(0xffffffffu, static_cast<unsigned long long>(v), o));
        else
            return __shfl_xor_sync(0xffffffffu, v, o);
    }
};

__global__ void __launch_bounds__(kThreads)
    sample_k(float* x, int64_t cols, const SampleRow* rows, const LogitEdit* edits,
             const uint64_t* masks, int32_t* out) {
    __shared__ double wd[kWarps * 16];
    __shared__ int wc[kWarps * 16];
    __shared__ float cl[sample::kListCap];
    __shared__ int32_t cid[sample::kListCap];
    Block g{wd, wc, cl, cid};
    const int32_t id = sample::draw_row(g, x + blockIdx.x * cols, static_cast<int>(cols),
                                        rows[blockIdx.x], edits, masks);
    if (threadIdx.x == 0) out[blockIdx.x] = id;
}

}  // namespace

void sample(float* x, int64_t n_rows, int64_t cols, const SampleRow* rows, const LogitEdit* edits,
            const uint64_t* masks, int32_t* out, cudaStream_t s) {
    if (n_rows <= 0) return;
    sample_k<<<static_cast<unsigned>(n_rows), kThreads, 0, s>>>(x, cols, rows, edits, masks, out);
    check(cudaGetLastError(), "sample");
}

}  // namespace ferry::kernels::cuda
