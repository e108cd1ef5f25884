// The paged KV cache on the GPU: rows written into their blocks' slots, keys turned in place, and
// attention over a sequence's block table. The cache keeps the CPU's layout (quant/kv_format.h:
// a block is [KV head][slot][head_dim], then its per-(slot, head) scales) in f32, f16, int8 or
// fp8, so block tables, prefix sharing and copy-on-write work unchanged; the 8-bit codes are
// kv_quant.h's, the CPU's bit for bit.
//
// Attention: one thread block per (token, query head). Positions are taken 128 at a time, each
// thread scoring one against the query; a streaming softmax (running maximum and sum) folds the
// tile's weights into the output, each thread owning head_dim / 128 of its dimensions. Where the
// (token, head) pairs are too few to fill the GPU (decode, few sequences, long contexts), the
// span is split across more blocks (flash-decoding) and their partial softmaxes merged after.
#include <cuda_fp16.h>

#include <cmath>
#include <stdexcept>

#include "kernels/cuda/check.h"
#include "kernels/cuda/kv_quant.h"
#include "kernels/cuda/launch.h"

namespace ferry::kernels::cuda {
namespace {

constexpr int kAttnThreads = 128;
constexpr int kMaxHeadDim = 256;
constexpr int kDimsPerThread = kMaxHeadDim / kAttnThreads;

constexpr int kF32 = 0, kF16 = 1, kInt8 = 2, kFp8 = 3;  // quant::KvDType's values

__device__ int elem_bytes(int dtype) {
    return dtype == kF32 ? 4 : dtype == kF16 ? 2 : 1;
}
__device__ bool token_scaled(int dtype, bool key) {  // quant::kv_token_scales
    return dtype == kFp8 || (dtype == kInt8 && !key);
}
__device__ int n_heads_of(const KvGeometry& g) {
    return g.kv_dim / g.head_dim;
}
// A (layer, block) region's scale of slot p, KV head h.
__device__ float* scale_at(std::byte* region, const KvGeometry& g, int64_t slot, int h) {
    return reinterpret_cast<float*>(region + g.scale_offset) + slot * n_heads_of(g) + h;
}

// One stored row of a KV head: where its elements are, its token scale, or (int8 keys) its
// channels' scales.
struct Row {
    const std::byte* p;
    float scale;
    const float* channel;
};

__device__ float value(const Row& r, int d, int dtype) {
    switch (dtype) {
        case kF16:
            return __half2float(reinterpret_cast<const __half*>(r.p)[d]);
        case kInt8:
            return kvq::int8_value(reinterpret_cast<const int8_t*>(r.p)[d],
                                   r.channel ? r.channel[d] : r.scale);
        case kFp8:
            return kvq::fp8_value(reinterpret_cast<const uint8_t*>(r.p)[d], r.scale);
        default:
            return reinterpret_cast<const float*>(r.p)[d];
    }
}

// A warp's 32 lanes for kvq::store_row_8bit.
struct WarpLanes {
    __device__ int lane() const { return threadIdx.x & 31; }
    __device__ int count() const { return 32; }
    __device__ float max(float v) const {
        for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
        return v;
    }
    __device__ bool any(bool v) const { return __any_sync(0xffffffffu, v); }
    __device__ int sum(int v) const {
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        return v;
    }
};

// Stores a row of head_dim floats held in `x` (shared memory or global) as the cache's type,
// by one warp. Returns how many int8 key codes were clipped.
__device__ int store_row_warp(std::byte* row, float* scale, const float* channel, const float* x,
                              int hd, int dtype, bool key) {
    if (dtype == kInt8 || dtype == kFp8)
        return kvq::store_row_8bit(reinterpret_cast<uint8_t*>(row), scale, key ? channel : nullptr,
                                   x, hd, dtype == kInt8, WarpLanes{});
    for (int d = threadIdx.x & 31; d < hd; d += 32) {
        if (dtype == kF16)
            reinterpret_cast<__half*>(row)[d] = __float2half_rn(x[d]);
        else
            reinterpret_cast<float*>(row)[d] = x[d];
    }
    return 0;
}

// Each (key or value, KV head) row of a token by one warp.
__global__ void kv_write_k(std::byte* k_base, std::byte* v_base, KvGeometry g, const KvSlot* slots,
                           const float* k, const float* v, const float* k_channel,
                           unsigned long long* clipped) {
    const int64_t t = blockIdx.x;
    const KvSlot sl = slots[t];
    const int n_heads = n_heads_of(g), hd = g.head_dim, eb = elem_bytes(g.dtype);
    for (int j = threadIdx.x >> 5; j < 2 * n_heads; j += blockDim.x >> 5) {
        const bool key = j < n_heads;
        const int h = key ? j : j - n_heads;
        std::byte* region = key ? k_base + sl.k_region : v_base + sl.v_region;
        std::byte* row = region + (h * g.head_stride + sl.slot * g.pos_stride) * eb;
        const float* x = (key ? k : v) + t * g.kv_dim + h * hd;
        const int c = store_row_warp(row, scale_at(region, g, sl.slot, h),
                                     k_channel ? k_channel + h * hd : nullptr, x, hd, g.dtype, key);
        if (c && clipped && (threadIdx.x & 31) == 0)
            atomicAdd(clipped, static_cast<unsigned long long>(c));
    }
}

// Every key row of a block region turned by one rotation: read as floats into shared memory,
// rotated, stored again (fp8 with a fresh scale), one warp a (slot, head) row.
constexpr int kRotateWarps = 4;
__global__ void kv_rotate_k(std::byte* region, KvGeometry g, const float* cos_sin, int rope_dim,
                            bool neox) {
    __shared__ float rows[kRotateWarps][256];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, hd = g.head_dim;
    const int n_heads = n_heads_of(g), half = rope_dim / 2, eb = elem_bytes(g.dtype);
    float* x = rows[warp];
    for (int j = warp; j < g.block_size * n_heads; j += kRotateWarps) {
        const int slot = j / n_heads, h = j % n_heads;
        std::byte* row = region + (h * g.head_stride + slot * g.pos_stride) * eb;
        float* scale = scale_at(region, g, slot, h);
        const Row r{row, token_scaled(g.dtype, true) ? *scale : 1.0f, nullptr};
        for (int d = lane; d < hd; d += 32) x[d] = value(r, d, g.dtype);
        __syncwarp();
        for (int i = lane; i < half; i += 32) {
            const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
            const float x0 = x[a], x1 = x[b];
            x[a] = x0 * c - x1 * s;
            x[b] = x0 * s + x1 * c;
        }
        __syncwarp();
        store_row_warp(row, scale, nullptr, x, hd, g.dtype, true);
        __syncwarp();
    }
}

__device__ float block_reduce(float v, float* red, bool is_max) {
    for (int o = 16; o > 0; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, u) : v + u;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < kAttnThreads / 32 ? red[lane] : (is_max ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, u) : v + u;
    }
    return v;
}

__device__ bool visible(const AttnToken& t, int64_t p) {
    if (p < t.kv_start || p >= t.n_kv) return false;
    if (t.tree_start >= 0 && p >= t.tree_start)
        return ((t.tree_mask >> (p - t.tree_start)) & 1) != 0;
    return true;
}

// Position p's key or value row of KV head g (k_channel: this layer's int8 key scales).
__device__ Row kv_row(const std::byte* base, const int64_t* table, const AttnToken& t,
                      const KvGeometry& geo, int64_t p, int g, bool key, const float* k_channel) {
    const int64_t region = table[2 * (t.table_off + p / geo.block_size) + (key ? 0 : 1)];
    const int64_t slot = p % geo.block_size;
    auto* r = const_cast<std::byte*>(base + region);
    Row row{r + (g * geo.head_stride + slot * geo.pos_stride) * elem_bytes(geo.dtype), 1.0f,
            nullptr};
    if (token_scaled(geo.dtype, key)) row.scale = *scale_at(r, geo, slot, g);
    if (key && geo.dtype == kInt8) row.channel = k_channel + g * geo.head_dim;
    return row;
}

__device__ float score(const float* q, const Row& k, int hd, int dtype, float scale) {
    float s = 0;
    for (int d = 0; d < hd; ++d) s += q[d] * value(k, d, dtype);
    return s * scale;
}

// gridDim.z > 1: flash-decoding. Block z takes the z-th share of each token's visible span and
// leaves its running maximum, sum and unnormalised output in `part` ([m, l, acc[head_dim]] per
// (token, head, share)) for attention_merge_k; with one share it writes the output itself.
__global__ void attention_k(const std::byte* k_base, const std::byte* v_base, KvGeometry geo,
                            const float* k_channel, const int64_t* table, const AttnToken* tokens,
                            int n_head, int n_head_kv, float scale, const float* q, float* out,
                            float* mass, float* part) {
    __shared__ float qs[kMaxHeadDim];
    __shared__ float w[kAttnThreads];
    __shared__ float red[32];
    const int64_t ti = blockIdx.x;
    const int h = blockIdx.y, hd = geo.head_dim, g = h / (n_head / n_head_kv);
    const AttnToken t = tokens[ti];
    const float* qh = q + (ti * n_head + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = qh[d];
    __syncthreads();

    const int64_t span = t.n_kv - t.kv_start, share = (span + gridDim.z - 1) / gridDim.z;
    const int64_t p_begin = t.kv_start + blockIdx.z * share;
    const int64_t p_end = p_begin + share < t.n_kv ? p_begin + share : t.n_kv;
    float m = -INFINITY, l = 0, acc[kDimsPerThread] = {};
    for (int64_t p0 = p_begin; p0 < p_end; p0 += kAttnThreads) {
        const int64_t p = p0 + threadIdx.x;
        float s = -INFINITY;
        if (p < p_end && visible(t, p))
            s = score(qs, kv_row(k_base, table, t, geo, p, g, true, k_channel), hd, geo.dtype,
                      scale);
        const float tile_max = block_reduce(s, red, true);
        if (tile_max == -INFINITY) continue;  // nothing visible in this tile (uniform branch)
        const float m_new = fmaxf(m, tile_max);
        const float c = m == -INFINITY ? 0.0f : expf(m - m_new);
        const float e = s == -INFINITY ? 0.0f : expf(s - m_new);
        w[threadIdx.x] = e;
        l = l * c + block_reduce(e, red, false);
        m = m_new;
        __syncthreads();
        const int64_t left = p_end - p0;
        const int n = static_cast<int>(left < kAttnThreads ? left : kAttnThreads);
#pragma unroll
        for (int i = 0; i < kDimsPerThread; ++i) acc[i] *= c;
        for (int j = 0; j < n; ++j) {
            const float wj = w[j];
            if (wj == 0.0f) continue;
            const Row vrow = kv_row(v_base, table, t, geo, p0 + j, g, false, nullptr);
#pragma unroll
            for (int i = 0; i < kDimsPerThread; ++i) {
                const int d = threadIdx.x + i * kAttnThreads;
                if (d < hd) acc[i] += wj * value(vrow, d, geo.dtype);
            }
        }
        __syncthreads();
    }
    if (part) {
        float* pp = part + ((ti * n_head + h) * gridDim.z + blockIdx.z) * (hd + 2);
        if (threadIdx.x == 0) pp[0] = m, pp[1] = l;
#pragma unroll
        for (int i = 0; i < kDimsPerThread; ++i) {
            const int d = threadIdx.x + i * kAttnThreads;
            if (d < hd) pp[2 + d] = acc[i];
        }
        return;
    }
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    float* o = out + (ti * n_head + h) * hd;
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) {
        const int d = threadIdx.x + i * kAttnThreads;
        if (d < hd) o[d] = acc[i] * inv;
    }
    // H2O's attention mass: the final weights again, summed into their blocks.
    if (mass && t.mass_off >= 0 && l > 0) {
        float* mrow = mass + t.mass_off + static_cast<int64_t>(h) * t.n_blocks;
        for (int64_t p = t.kv_start + threadIdx.x; p < t.n_kv; p += blockDim.x)
            if (visible(t, p)) {
                const float s = score(qs, kv_row(k_base, table, t, geo, p, g, true, k_channel), hd,
                                      geo.dtype, scale);
                atomicAdd(mrow + p / geo.block_size, expf(s - m) * inv);
            }
    }
}

// The shares of attention_k merged: each rescaled to the largest maximum, summed, normalised.
__global__ void attention_merge_k(const float* part, int shares, int hd, float* out) {
    const int64_t row = blockIdx.x;  // token x n_head + head
    const float* pr = part + row * shares * (hd + 2);
    float mx = -INFINITY;
    for (int z = 0; z < shares; ++z) mx = fmaxf(mx, pr[z * (hd + 2)]);
    float l = 0;
    for (int z = 0; z < shares; ++z) {
        const float mz = pr[z * (hd + 2)];
        if (mz != -INFINITY) l += pr[z * (hd + 2) + 1] * expf(mz - mx);
    }
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0;
        for (int z = 0; z < shares; ++z) {
            const float mz = pr[z * (hd + 2)];
            if (mz != -INFINITY) o += pr[z * (hd + 2) + 2 + d] * expf(mz - mx);
        }
        out[row * hd + d] = o * inv;
    }
}

}  // namespace

void kv_write(std::byte* k_base, std::byte* v_base, const KvGeometry& g, const KvSlot* slots,
              const float* k, const float* v, int64_t n_tokens, const float* k_channel,
              unsigned long long* clipped, cudaStream_t s) {
    if (n_tokens <= 0) return;
    kv_write_k<<<static_cast<unsigned>(n_tokens), 128, 0, s>>>(k_base, v_base, g, slots, k, v,
                                                               k_channel, clipped);
    check_launch("kv_write");
}

void kv_rotate(std::byte* region, const KvGeometry& g, const float* cos_sin, int rope_dim,
               bool neox, cudaStream_t s) {
    if (g.head_dim > 256) throw std::invalid_argument("CUDA kv_rotate: head_dim above 256");
    kv_rotate_k<<<1, 32 * kRotateWarps, 0, s>>>(region, g, cos_sin, rope_dim, neox);
    check_launch("kv_rotate");
}

void attention(const std::byte* k_base, const std::byte* v_base, const KvGeometry& g,
               const float* k_channel, const int64_t* table, const AttnToken* tokens,
               int64_t n_tokens, int n_head, int n_head_kv, float scale, const float* q, float* out,
               float* mass, int shares, float* part, cudaStream_t s) {
    if (n_tokens <= 0) return;
    if (g.head_dim > kMaxHeadDim)
        throw std::invalid_argument("CUDA attention: head_dim above 256 is not supported yet");
    if (shares > 1 && (mass || !part))
        throw std::invalid_argument("CUDA attention: a split needs its workspace and no mass");
    const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(n_head),
                    static_cast<unsigned>(shares > 1 ? shares : 1));
    attention_k<<<grid, kAttnThreads, 0, s>>>(k_base, v_base, g, k_channel, table, tokens, n_head,
                                              n_head_kv, scale, q, out, mass,
                                              shares > 1 ? part : nullptr);
    check_launch("attention");
    if (shares > 1) {
        attention_merge_k<<<static_cast<unsigned>(n_tokens * n_head), 128, 0, s>>>(part, shares,
                                                                                   g.head_dim, out);
        check_launch("attention merge");
    }
}

}  // namespace ferry::kernels::cuda
