// The paged KV cache on the GPU: rows written into their blocks' slots, keys turned in place, and
// attention over a sequence's block table. The cache keeps the CPU's layout (quant/kv_format.h:
// a block is [KV head][slot][head_dim]) in f32 or f16, so block tables, prefix sharing and
// copy-on-write work unchanged.
//
// Attention: one thread block per (token, query head). Positions are taken 128 at a time, each
// thread scoring one against the query; a streaming softmax (running maximum and sum) folds the
// tile's weights into the output, each thread owning head_dim / 128 of its dimensions. Correct
// first: a flash-decoding split over the context (issue 18) is the fast path still to come.
#include <cuda_fp16.h>

#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace ferry::kernels::cuda {
namespace {

constexpr int kAttnThreads = 128;
constexpr int kMaxHeadDim = 256;
constexpr int kDimsPerThread = kMaxHeadDim / kAttnThreads;

__device__ float load_elem(const std::byte* p, int64_t i, bool f16) {
    return f16 ? __half2float(reinterpret_cast<const __half*>(p)[i])
               : reinterpret_cast<const float*>(p)[i];
}

__device__ void store_elem(std::byte* p, int64_t i, float v, bool f16) {
    if (f16)
        reinterpret_cast<__half*>(p)[i] = __float2half_rn(v);
    else
        reinterpret_cast<float*>(p)[i] = v;
}

__global__ void kv_write_k(std::byte* k_base, std::byte* v_base, KvGeometry g, const KvSlot* slots,
                           const float* k, const float* v) {
    const int64_t t = blockIdx.x;
    const KvSlot sl = slots[t];
    for (int i = threadIdx.x; i < g.kv_dim; i += blockDim.x) {
        const int h = i / g.head_dim, d = i % g.head_dim;
        const int64_t at = h * g.head_stride + sl.slot * g.pos_stride + d;
        store_elem(k_base + sl.k_region, at, k[t * g.kv_dim + i], g.f16);
        store_elem(v_base + sl.v_region, at, v[t * g.kv_dim + i], g.f16);
    }
}

__global__ void kv_rotate_k(std::byte* region, KvGeometry g, const float* cos_sin, int rope_dim,
                            bool neox) {
    const int slot = blockIdx.x, half = rope_dim / 2;
    const int n_heads = g.kv_dim / g.head_dim;
    for (int j = threadIdx.x; j < n_heads * half; j += blockDim.x) {
        const int h = j / half, i = j % half;
        const int64_t row = h * g.head_stride + slot * g.pos_stride;
        const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        const float x0 = load_elem(region, row + a, g.f16), x1 = load_elem(region, row + b, g.f16);
        store_elem(region, row + a, x0 * c - x1 * s, g.f16);
        store_elem(region, row + b, x0 * s + x1 * c, g.f16);
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

// Position p's key or value row of KV head g.
__device__ const std::byte* kv_row(const std::byte* base, const int64_t* table, const AttnToken& t,
                                   const KvGeometry& geo, int64_t p, int g, bool key) {
    const int64_t region = table[2 * (t.table_off + p / geo.block_size) + (key ? 0 : 1)];
    const int64_t eb = geo.f16 ? 2 : 4;
    return base + region + (g * geo.head_stride + (p % geo.block_size) * geo.pos_stride) * eb;
}

__device__ float score(const float* q, const std::byte* krow, int hd, bool f16, float scale) {
    float s = 0;
    for (int d = 0; d < hd; ++d) s += q[d] * load_elem(krow, d, f16);
    return s * scale;
}

__global__ void attention_k(const std::byte* k_base, const std::byte* v_base, KvGeometry geo,
                            const int64_t* table, const AttnToken* tokens, int n_head,
                            int n_head_kv, float scale, const float* q, float* out, float* mass) {
    __shared__ float qs[kMaxHeadDim];
    __shared__ float w[kAttnThreads];
    __shared__ float red[32];
    const int64_t ti = blockIdx.x;
    const int h = blockIdx.y, hd = geo.head_dim, g = h / (n_head / n_head_kv);
    const AttnToken t = tokens[ti];
    const float* qh = q + (ti * n_head + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = qh[d];
    __syncthreads();

    float m = -INFINITY, l = 0, acc[kDimsPerThread] = {};
    for (int64_t p0 = t.kv_start; p0 < t.n_kv; p0 += kAttnThreads) {
        const int64_t p = p0 + threadIdx.x;
        float s = -INFINITY;
        if (visible(t, p))
            s = score(qs, kv_row(k_base, table, t, geo, p, g, true), hd, geo.f16, scale);
        const float tile_max = block_reduce(s, red, true);
        if (tile_max == -INFINITY) continue;  // nothing visible in this tile (uniform branch)
        const float m_new = fmaxf(m, tile_max);
        const float c = m == -INFINITY ? 0.0f : expf(m - m_new);
        const float e = s == -INFINITY ? 0.0f : expf(s - m_new);
        w[threadIdx.x] = e;
        l = l * c + block_reduce(e, red, false);
        m = m_new;
        __syncthreads();
        const int64_t left = t.n_kv - p0;
        const int n = static_cast<int>(left < kAttnThreads ? left : kAttnThreads);
#pragma unroll
        for (int i = 0; i < kDimsPerThread; ++i) acc[i] *= c;
        for (int j = 0; j < n; ++j) {
            const float wj = w[j];
            if (wj == 0.0f) continue;
            const std::byte* vrow = kv_row(v_base, table, t, geo, p0 + j, g, false);
#pragma unroll
            for (int i = 0; i < kDimsPerThread; ++i) {
                const int d = threadIdx.x + i * kAttnThreads;
                if (d < hd) acc[i] += wj * load_elem(vrow, d, geo.f16);
            }
        }
        __syncthreads();
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
                const float s =
                    score(qs, kv_row(k_base, table, t, geo, p, g, true), hd, geo.f16, scale);
                atomicAdd(mrow + p / geo.block_size, expf(s - m) * inv);
            }
    }
}

}  // namespace

void kv_write(std::byte* k_base, std::byte* v_base, const KvGeometry& g, const KvSlot* slots,
              const float* k, const float* v, int64_t n_tokens, cudaStream_t s) {
    if (n_tokens <= 0) return;
    kv_write_k<<<static_cast<unsigned>(n_tokens), 128, 0, s>>>(k_base, v_base, g, slots, k, v);
    check_launch("kv_write");
}

void kv_rotate(std::byte* region, const KvGeometry& g, const float* cos_sin, int rope_dim,
               bool neox, cudaStream_t s) {
    kv_rotate_k<<<static_cast<unsigned>(g.block_size), 128, 0, s>>>(region, g, cos_sin, rope_dim,
                                                                    neox);
    check_launch("kv_rotate");
}

void attention(const std::byte* k_base, const std::byte* v_base, const KvGeometry& g,
               const int64_t* table, const AttnToken* tokens, int64_t n_tokens, int n_head,
               int n_head_kv, float scale, const float* q, float* out, float* mass,
               cudaStream_t s) {
    if (n_tokens <= 0) return;
    if (g.head_dim > kMaxHeadDim)
        throw std::invalid_argument("CUDA attention: head_dim above 256 is not supported yet");
    const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(n_head));
    attention_k<<<grid, kAttnThreads, 0, s>>>(k_base, v_base, g, table, tokens, n_head, n_head_kv,
                                              scale, q, out, mass);
    check_launch("attention");
}

}  // namespace ferry::kernels::cuda
