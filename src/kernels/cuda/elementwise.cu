// Elementwise and row kernels of the CUDA backend: one thread per element, or one block per row
// where a row reduces (norms, softmax, argmax). Each follows the CPU reference
// (kernels/cpu/reference.cpp) formula for formula; sums run in a different order, so results
// agree within float rounding, not bit for bit.
#include <cuda_fp16.h>

#include <cmath>
#include <stdexcept>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/weight_decode.h"

namespace ferry::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < 65535 * 64 ? b : 65535 * 64);
}

// Sum of v over the block (every thread gets it); `red` holds 32 floats.
__device__ float block_sum(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    const int nw = (blockDim.x + 31) >> 5;
    v = lane < nw ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ float block_max(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    const int nw = (blockDim.x + 31) >> 5;
    v = lane < nw ? red[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__global__ void rmsnorm_k(const float* x, const float* w, float* out, int64_t cols, float eps) {
    __shared__ float red[32];
    const float* xr = x + blockIdx.x * cols;
    float ss = 0;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    const float sc = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
    float* o = out + blockIdx.x * cols;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) o[i] = xr[i] * sc * w[i];
}

template <class F>
__global__ void each_k(int64_t n, F f) {
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
         i += int64_t{gridDim.x} * blockDim.x)
        f(i);
}

template <class F>
void each(int64_t n, cudaStream_t s, F f) {
    if (n <= 0) return;
    each_k<<<blocks_for(n), kThreads, 0, s>>>(n, f);
    check_launch("elementwise");
}

__global__ void rope_k(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_sin,
                       bool neox) {
    const int64_t t = blockIdx.x;
    const int half = rope_dim / 2;
    float* row = x + t * n_heads * head_dim;
    const float* cs = cos_sin + t * rope_dim;
    for (int j = threadIdx.x; j < n_heads * half; j += blockDim.x) {
        const int h = j / half, i = j % half;
        const float c = cs[2 * i], sn = cs[2 * i + 1];
        float* v = row + h * head_dim;
        const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * sn;
        v[b] = x0 * sn + x1 * c;
    }
}

__global__ void embed_k(const void* table, bool f16, int64_t cols, const int32_t* tokens,
                        float* out) {
    const int64_t t = blockIdx.x, row = tokens[t];
    float* o = out + t * cols;
    if (f16) {
        const __half* r = static_cast<const __half*>(table) + row * cols;
        for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) o[i] = __half2float(r[i]);
    } else {
        const float* r = static_cast<const float*>(table) + row * cols;
        for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) o[i] = r[i];
    }
}

template <DType Type>
__global__ void embed_blocks_k(const uint8_t* table, size_t row_bytes, int64_t cols,
                               const int32_t* tokens, float* out) {
    const uint8_t* r = table + tokens[blockIdx.x] * row_bytes;
    float* o = out + blockIdx.x * cols;
    for (int64_t ch = threadIdx.x; ch < cols / 8; ch += blockDim.x)
        decode::Layout<Type>::chunk(r, ch, o + ch * 8);
}

__global__ void softmax_k(float* x, int64_t cols) {
    __shared__ float red[32];
    float* r = x + blockIdx.x * cols;
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) mx = fmaxf(mx, r[i]);
    mx = block_max(mx, red);
    float sum = 0;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
        const float e = expf(r[i] - mx);
        r[i] = e;
        sum += e;
    }
    sum = block_sum(sum, red);
    const float inv = 1.0f / sum;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) r[i] *= inv;
}

// (value, index) with the CPU's order: NaN loses, a larger value wins, the lower index on ties.
__device__ bool better(float v, int64_t i, float bv, int64_t bi) {
    if (isnan(v)) return false;
    if (bi < 0 || isnan(bv)) return true;
    return v > bv || (v == bv && i < bi);
}

__global__ void argmax_k(const float* x, int64_t cols, int32_t* out) {
    __shared__ float sv[32];
    __shared__ int64_t si[32];
    const float* r = x + blockIdx.x * cols;
    float bv = NAN;
    int64_t bi = -1;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        if (better(r[i], i, bv, bi)) bv = r[i], bi = i;
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi >= 0 && better(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < static_cast<int>((blockDim.x + 31) >> 5); ++w)
            if (si[w] >= 0 && better(sv[w], si[w], bv, bi)) bv = sv[w], bi = si[w];
        out[blockIdx.x] = static_cast<int32_t>(bi < 0 ? 0 : bi);
    }
}

__global__ void gather_rows_k(const std::byte* x, const int32_t* rows, size_t row_bytes,
                              std::byte* out) {
    const std::byte* src = x + static_cast<size_t>(rows[blockIdx.x]) * row_bytes;
    std::byte* dst = out + blockIdx.x * row_bytes;
    for (size_t i = threadIdx.x; i < row_bytes; i += blockDim.x) dst[i] = src[i];
}

__global__ void add_rows_scaled_k(float* x, const int32_t* rows, const float* w, const float* y,
                                  int64_t n, int64_t cols) {
    const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
    if (j >= cols) return;
    for (int64_t i = 0; i < n; ++i) x[rows[i] * cols + j] += w[i] * y[i * cols + j];
}

__global__ void copy_ranges_k(std::byte* base, const int64_t* src_off, const int64_t* dst_off,
                              size_t bytes) {
    const std::byte* src = base + src_off[blockIdx.x];
    std::byte* dst = base + dst_off[blockIdx.x];
    for (size_t i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
}

}  // namespace

void rmsnorm(const float* x, const float* w, float* out, int64_t rows, int64_t cols, float eps,
             cudaStream_t s) {
    if (rows <= 0) return;
    rmsnorm_k<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, w, out, cols, eps);
    check_launch("rmsnorm");
}

void add(float* x, const float* y, int64_t n, cudaStream_t s) {
    each(n, s, [=] __device__(int64_t i) { x[i] += y[i]; });
}

void add_bias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t s) {
    each(rows * cols, s, [=] __device__(int64_t i) { y[i] += bias[i % cols]; });
}

void silu_mul(float* gate, const float* up, int64_t n, cudaStream_t s) {
    each(n, s, [=] __device__(int64_t i) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    });
}

void gelu_mul(float* gate, const float* up, int64_t n, cudaStream_t s) {
    each(n, s, [=] __device__(int64_t i) {
        constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
        const float x = gate[i];
        const float u2 = 2.0f * k * (x + 0.044715f * x * x * x);
        gate[i] = x / (1.0f + expf(-u2)) * up[i];
    });
}

void scale(float* x, float a, int64_t n, cudaStream_t s) {
    each(n, s, [=] __device__(int64_t i) { x[i] *= a; });
}

void softcap(float* x, float cap, int64_t n, cudaStream_t s) {
    each(n, s, [=] __device__(int64_t i) { x[i] = cap * tanhf(x[i] / cap); });
}

void rope(float* x, int64_t rows, int n_heads, int head_dim, int rope_dim, const float* cos_sin,
          bool neox, cudaStream_t s) {
    if (rows <= 0 || rope_dim <= 0) return;
    rope_k<<<static_cast<unsigned>(rows), 128, 0, s>>>(x, n_heads, head_dim, rope_dim, cos_sin,
                                                       neox);
    check_launch("rope");
}

void embed(const void* table, DType type, size_t row_bytes, int64_t cols, const int32_t* tokens,
           int64_t n, float* out, cudaStream_t s) {
    if (n <= 0) return;
    const auto grid = static_cast<unsigned>(n);
    if (type == DType::F16 || type == DType::F32) {
        embed_k<<<grid, kThreads, 0, s>>>(table, type == DType::F16, cols, tokens, out);
    } else if (cols % 8 != 0 || !decode::visit(type, [&](auto t) {
                   embed_blocks_k<decltype(t)::value><<<grid, kThreads, 0, s>>>(
                       static_cast<const uint8_t*>(table), row_bytes, cols, tokens, out);
               })) {
        throw std::invalid_argument("cuda embed: no kernel for this table's type and width");
    }
    check_launch("embed");
}

void softmax(float* x, int64_t rows, int64_t cols, cudaStream_t s) {
    if (rows <= 0) return;
    softmax_k<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, cols);
    check_launch("softmax");
}

void argmax(const float* x, int64_t rows, int64_t cols, int32_t* out, cudaStream_t s) {
    if (rows <= 0) return;
    argmax_k<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, cols, out);
    check_launch("argmax");
}

void gather_rows(const std::byte* x, const int32_t* rows, int64_t n, size_t row_bytes,
                 std::byte* out, cudaStream_t s) {
    if (n <= 0) return;
    gather_rows_k<<<static_cast<unsigned>(n), kThreads, 0, s>>>(x, rows, row_bytes, out);
    check_launch("gather_rows");
}

void add_rows_scaled(float* x, const int32_t* rows, const float* w, const float* y, int64_t n,
                     int64_t cols, cudaStream_t s) {
    if (n <= 0 || cols <= 0) return;
    add_rows_scaled_k<<<static_cast<unsigned>((cols + kThreads - 1) / kThreads), kThreads, 0, s>>>(
        x, rows, w, y, n, cols);
    check_launch("add_rows_scaled");
}

void copy_ranges(std::byte* base, const int64_t* src_off, const int64_t* dst_off, int64_t n,
                 size_t bytes, cudaStream_t s) {
    if (n <= 0) return;
    copy_ranges_k<<<static_cast<unsigned>(n), 128, 0, s>>>(base, src_off, dst_off, bytes);
    check_launch("copy_ranges");
}

}  // namespace ferry::kernels::cuda
