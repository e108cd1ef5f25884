// y = x W^T on the GPU for f32 activations, accumulated in f32, over f16 or f32 weight rows or
// any other type's own blocks (weight_decode.h turns 8 weights at a time into floats in
// registers, so a Q4 matrix streams 4.5 bits a weight, not the 32 of a widened copy).
//  - Up to 8 tokens (decode, a speculative verification): one warp per weight row, reading the
//    row once for all the tokens (f16 / f32 rows with 16-byte loads; block types a chunk of 8
//    a lane, byte loads for now, wider ones the next step): the step streams the weights, so
//    this is the path that must run at the memory's rate.
//  - More tokens (prefill): 64 x 64 output tiles through shared memory. A plain tiled kernel,
//    correct first; tensor cores (cuBLASLt, issue 18) are the next step for this path.
#include <cuda_fp16.h>

#include <stdexcept>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/weight_decode.h"

namespace ferry::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

template <bool F16>
__device__ float weight_at(const void* w, int64_t i) {
    if constexpr (F16)
        return __half2float(static_cast<const __half*>(w)[i]);
    else
        return static_cast<const float*>(w)[i];
}

template <int T, bool F16>
__global__ void rows_k(const void* w, int64_t rows, int64_t cols, const float* x, float* y,
                       int64_t ldy, bool vec) {
    const int lane = threadIdx.x & 31;
    const int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + (threadIdx.x >> 5);
    if (r >= rows) return;
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; ++t) acc[t] = 0.0f;
    // 8 weights per lane and step where every row starts 16-byte aligned (`vec`).
    if (vec) {
        for (int64_t c = lane * 8; c < cols; c += 256) {
            float wf[8];
            if constexpr (F16) {
                const uint4 raw =
                    *reinterpret_cast<const uint4*>(static_cast<const __half*>(w) + r * cols + c);
                const __half2* h2 = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const float2 f = __half22float2(h2[k]);
                    wf[2 * k] = f.x, wf[2 * k + 1] = f.y;
                }
            } else {
                const float* wr = static_cast<const float*>(w) + r * cols + c;
                const float4 a = *reinterpret_cast<const float4*>(wr);
                const float4 b = *reinterpret_cast<const float4*>(wr + 4);
                wf[0] = a.x, wf[1] = a.y, wf[2] = a.z, wf[3] = a.w;
                wf[4] = b.x, wf[5] = b.y, wf[6] = b.z, wf[7] = b.w;
            }
#pragma unroll
            for (int t = 0; t < T; ++t) {
                const float* xt = x + t * cols + c;
                const float4 a = *reinterpret_cast<const float4*>(xt);
                const float4 b = *reinterpret_cast<const float4*>(xt + 4);
                acc[t] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x +
                          wf[5] * b.y + wf[6] * b.z + wf[7] * b.w;
            }
        }
    } else {
        for (int64_t c = lane; c < cols; c += 32) {
            const float wv = weight_at<F16>(w, r * cols + c);
#pragma unroll
            for (int t = 0; t < T; ++t) acc[t] += wv * x[t * cols + c];
        }
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
        float v = acc[t];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) y[t * ldy + r] = v;
    }
}

constexpr int kTile = 64, kTileK = 32;

using WeightTile = float[kTileK][kTile + 1];  // [k][row]

// The weight tile's loaders: element by element (f16, f32, any width), or one chunk of 8 a
// thread from a type's blocks (a 64-row x 32-column tile is exactly 256 chunks).
template <bool F16>
struct ElementTile {
    const void* w;
    __device__ void load(WeightTile& ws, int64_t r0, int64_t k0, int64_t rows, int64_t cols) const {
        for (int i = threadIdx.x; i < kTile * kTileK; i += blockDim.x) {
            const int e = i / kTileK, k = i % kTileK;
            ws[k][e] =
                k0 + k < cols && r0 + e < rows ? weight_at<F16>(w, (r0 + e) * cols + k0 + k) : 0.0f;
        }
    }
};
template <DType Type>
struct BlockTile {
    const uint8_t* w;
    size_t row_bytes;
    __device__ void load(WeightTile& ws, int64_t r0, int64_t k0, int64_t rows, int64_t cols) const {
        static_assert(kTile * kTileK / 8 == 256, "one chunk per thread");
        const int e = threadIdx.x / 4, k = (threadIdx.x % 4) * 8;
        float wf[8] = {};
        if (r0 + e < rows && k0 + k < cols)
            decode::Layout<Type>::chunk(w + (r0 + e) * row_bytes, (k0 + k) / 8, wf);
#pragma unroll
        for (int j = 0; j < 8; ++j) ws[k + j][e] = wf[j];
    }
};

// 256 threads, each 4 rows x 4 tokens of the 64 x 64 output tile.
template <class Tile>
__global__ void tiles_k(Tile tile, int64_t rows, int64_t cols, const float* x, int64_t n_tokens,
                        float* y, int64_t ldy) {
    __shared__ float xs[kTileK][kTile + 1];  // [k][token]
    __shared__ WeightTile ws;
    const int64_t r0 = blockIdx.x * int64_t{kTile}, t0 = blockIdx.y * int64_t{kTile};
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < cols; k0 += kTileK) {
        for (int i = threadIdx.x; i < kTile * kTileK; i += blockDim.x) {
            const int e = i / kTileK, k = i % kTileK;
            xs[k][e] = k0 + k < cols && t0 + e < n_tokens ? x[(t0 + e) * cols + k0 + k] : 0.0f;
        }
        tile.load(ws, r0, k0, rows, cols);
        __syncthreads();
#pragma unroll 8
        for (int k = 0; k < kTileK; ++k) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = xs[k][ty * 4 + i], b[i] = ws[k][tx * 4 + i];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i) {
        const int64_t t = t0 + ty * 4 + i;
        if (t >= n_tokens) break;
        for (int j = 0; j < 4; ++j) {
            const int64_t r = r0 + tx * 4 + j;
            if (r < rows) y[t * ldy + r] = acc[i][j];
        }
    }
}

template <class Tile>
void tiles(Tile tile, int64_t rows, int64_t cols, const float* x, int64_t n, float* y, int64_t ldy,
           cudaStream_t s) {
    const dim3 grid(static_cast<unsigned>((rows + kTile - 1) / kTile),
                    static_cast<unsigned>((n + kTile - 1) / kTile));
    tiles_k<<<grid, 256, 0, s>>>(tile, rows, cols, x, n, y, ldy);
}

template <bool F16>
void rows_for(int64_t n, const void* w, int64_t rows, int64_t cols, const float* x, float* y,
              int64_t ldy, cudaStream_t s) {
    const unsigned grid = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
    const unsigned threads = 32 * kWarpsPerBlock;
    const bool vec = cols % 8 == 0 &&
                     (reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(x)) % 16 == 0;
    switch (n) {
#define FERRY_ROWS_CASE(T)                                                      \
    case T:                                                                     \
        rows_k<T, F16><<<grid, threads, 0, s>>>(w, rows, cols, x, y, ldy, vec); \
        break;
        FERRY_ROWS_CASE(1)
        FERRY_ROWS_CASE(2)
        FERRY_ROWS_CASE(3)
        FERRY_ROWS_CASE(4)
        FERRY_ROWS_CASE(5)
        FERRY_ROWS_CASE(6)
        FERRY_ROWS_CASE(7)
        FERRY_ROWS_CASE(8)
#undef FERRY_ROWS_CASE
    }
}

// The same two shapes over a type's own blocks. A lane takes 8 weights (one chunk) a step, so
// a warp reads 256 consecutive weights of the row: whole blocks, contiguous bytes.
template <DType Type, int T>
__global__ void block_rows_k(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                             const float* x, float* y, int64_t ldy, bool vec) {
    using L = decode::Layout<Type>;
    const int lane = threadIdx.x & 31;
    const int64_t r = blockIdx.x * int64_t{kWarpsPerBlock} + (threadIdx.x >> 5);
    if (r >= rows) return;
    const uint8_t* row = w + r * row_bytes;
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; ++t) acc[t] = 0.0f;
    for (int64_t ch = lane; ch < cols / 8; ch += 32) {
        float wf[8];
        L::chunk(row, ch, wf);
#pragma unroll
        for (int t = 0; t < T; ++t) {
            const float* xt = x + t * cols + ch * 8;
            float xs[8];
            if (vec) {
                const float4 a = *reinterpret_cast<const float4*>(xt);
                const float4 b = *reinterpret_cast<const float4*>(xt + 4);
                xs[0] = a.x, xs[1] = a.y, xs[2] = a.z, xs[3] = a.w;
                xs[4] = b.x, xs[5] = b.y, xs[6] = b.z, xs[7] = b.w;
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) xs[j] = xt[j];
            }
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[t] += wf[j] * xs[j];
        }
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
        float v = acc[t];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) y[t * ldy + r] = v;
    }
}

template <DType Type>
void block_matmul(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols, const float* x,
                  int64_t n, float* y, int64_t ldy, cudaStream_t s) {
    if (n > 8) return tiles(BlockTile<Type>{w, row_bytes}, rows, cols, x, n, y, ldy, s);
    const unsigned grid = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
    const unsigned threads = 32 * kWarpsPerBlock;
    const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
    switch (n) {
#define FERRY_BLOCK_ROWS_CASE(T)                                                                  \
    case T:                                                                                       \
        block_rows_k<Type, T><<<grid, threads, 0, s>>>(w, row_bytes, rows, cols, x, y, ldy, vec); \
        break;
        FERRY_BLOCK_ROWS_CASE(1)
        FERRY_BLOCK_ROWS_CASE(2)
        FERRY_BLOCK_ROWS_CASE(3)
        FERRY_BLOCK_ROWS_CASE(4)
        FERRY_BLOCK_ROWS_CASE(5)
        FERRY_BLOCK_ROWS_CASE(6)
        FERRY_BLOCK_ROWS_CASE(7)
        FERRY_BLOCK_ROWS_CASE(8)
#undef FERRY_BLOCK_ROWS_CASE
    }
}

}  // namespace

void matmul(const void* w, DType type, size_t row_bytes, int64_t rows, int64_t cols, const float* x,
            int64_t n_tokens, float* y, int64_t ldy, cudaStream_t s) {
    if (n_tokens <= 0 || rows <= 0) return;
    if (type != DType::F16 && type != DType::F32) {
        if (cols % 8 != 0 || !decode::visit(type, [&](auto t) {
                block_matmul<decltype(t)::value>(static_cast<const uint8_t*>(w), row_bytes, rows,
                                                 cols, x, n_tokens, y, ldy, s);
            }))
            throw std::invalid_argument("cuda matmul: no kernel for this weight type and width");
        check_launch("matmul");
        return;
    }
    const bool f16 = type == DType::F16;
    if (n_tokens <= 8) {
        if (f16)
            rows_for<true>(n_tokens, w, rows, cols, x, y, ldy, s);
        else
            rows_for<false>(n_tokens, w, rows, cols, x, y, ldy, s);
    } else if (f16) {
        tiles(ElementTile<true>{w}, rows, cols, x, n_tokens, y, ldy, s);
    } else {
        tiles(ElementTile<false>{w}, rows, cols, x, n_tokens, y, ldy, s);
    }
    check_launch("matmul");
}

}  // namespace ferry::kernels::cuda
