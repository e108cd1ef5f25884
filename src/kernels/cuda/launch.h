// The CUDA backend's kernels as host functions: each enqueues its kernel on `stream` and returns.
// Pointers are device memory unless a parameter says host; every float tensor is row-major with
// dense rows (as the CPU backend reads them). Only cuda_backend.cu calls these.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/sample_args.h"

namespace ferry::kernels::cuda {

// ---- elementwise and row ops (elementwise.cu) --------------------------------------------
void rmsnorm(const float* x, const float* w, float* out, int64_t rows, int64_t cols, float eps,
             cudaStream_t s);
void add(float* x, const float* y, int64_t n, cudaStream_t s);
void add_bias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t s);
void silu_mul(float* gate, const float* up, int64_t n, cudaStream_t s);
void gelu_mul(float* gate, const float* up, int64_t n, cudaStream_t s);
void scale(float* x, float a, int64_t n, cudaStream_t s);
void softcap(float* x, float cap, int64_t n, cudaStream_t s);
// x {rows, n_heads * head_dim}; cos_sin {rows, rope_dim} as (cos, sin) pairs; neox: halves.
void rope(float* x, int64_t rows, int n_heads, int head_dim, int rope_dim, const float* cos_sin,
          bool neox, cudaStream_t s);
// out[t] = row tokens[t] of a table of `cols` weights a row, rows of row_bytes in `type`'s
// format: f16, f32, or a type weight_decode.h reads (with cols a multiple of 8).
void embed(const void* table, DType type, size_t row_bytes, int64_t cols, const int32_t* tokens,
           int64_t n, float* out, cudaStream_t s);
void softmax(float* x, int64_t rows, int64_t cols, cudaStream_t s);
// out[r] = the lowest index of row r's largest value; NaN never wins (0 when all are NaN).
void argmax(const float* x, int64_t rows, int64_t cols, int32_t* out, cudaStream_t s);
// out[r] = the token row r of x draws as rows[r] asks (sample_row.h), after its edits (a slice
// of `edits`) and its mask (words of `masks`) are applied to x in place; -1 where the mask
// allows nothing. `rows`, `edits` and `masks` in device memory.
void sample(float* x, int64_t n_rows, int64_t cols, const SampleRow* rows, const LogitEdit* edits,
            const uint64_t* masks, int32_t* out, cudaStream_t s);
// out[i] = x[rows[i]], rows of row_bytes bytes.
void gather_rows(const std::byte* x, const int32_t* rows, int64_t n, size_t row_bytes,
                 std::byte* out, cudaStream_t s);
// x[rows[i]] += w[i] * y[i], i in order for every column (a row may repeat).
void add_rows_scaled(float* x, const int32_t* rows, const float* w, const float* y, int64_t n,
                     int64_t cols, cudaStream_t s);
// dst[i] = src[i] for n byte ranges: src_off[i], dst_off[i] from base, `bytes` each.
void copy_ranges(std::byte* base, const int64_t* src_off, const int64_t* dst_off, int64_t n,
                 size_t bytes, cudaStream_t s);

// ---- matmul (matmul.cu) ------------------------------------------------------------------
// y[t * ldy + r] = sum_c w[r][c] * x[t][c] for w {rows, cols}, rows of row_bytes in `type`'s
// format: f16, f32, or a type weight_decode.h reads (with cols a multiple of 8).
void matmul(const void* w, DType type, size_t row_bytes, int64_t rows, int64_t cols, const float* x,
            int64_t n_tokens, float* y, int64_t ldy, cudaStream_t s);

// ---- paged KV cache and attention (attention.cu) -----------------------------------------
// Where a token's row goes: byte offsets of its block's key and value regions from their bases,
// and its slot.
struct KvSlot {
    int64_t k_region;
    int64_t v_region;
    int32_t slot;
    int32_t pad;
};
struct KvGeometry {
    int block_size;
    int kv_dim;
    int head_dim;
    int dtype;             // quant::KvDType's value: 0 f32, 1 f16, 2 int8, 3 fp8
    int64_t pos_stride;    // elements between slots of one head's rows
    int64_t head_stride;   // elements between heads' rows
    int64_t scale_offset;  // bytes from a region's start to its per-(slot, head) f32 scales
};
// k_channel: this layer's int8 key scales (kv_dim floats; int8 caches only); clipped counts
// the int8 key codes clipped to 127 steps.
void kv_write(std::byte* k_base, std::byte* v_base, const KvGeometry& g, const KvSlot* slots,
              const float* k, const float* v, int64_t n_tokens, const float* k_channel,
              unsigned long long* clipped, cudaStream_t s);
// Rotates every key of one block region in place (rope_dim / 2 pairs in cos_sin); fp8 rows get
// a fresh scale, int8 keys (fixed channel scales) are the caller's to refuse.
void kv_rotate(std::byte* region, const KvGeometry& g, const float* cos_sin, int rope_dim,
               bool neox, cudaStream_t s);

// One query token of an attention call: it sees positions [kv_start, n_kv) of its sequence,
// whose block regions are table[table_off .. table_off + n_blocks) (byte offsets of keys and
// values from their bases, interleaved k, v); a tree token only the masked ones from tree_start.
struct AttnToken {
    int64_t n_kv;
    int64_t kv_start;
    int64_t tree_start;  // < 0: no tree
    uint64_t tree_mask;
    int64_t table_off;
    int64_t mass_off;  // < 0: no attention mass wanted; else n_head x n_blocks floats from here
    int32_t n_blocks;
    int32_t pad;
};
// out[t][h] = softmax(q[t][h] . K * scale) . V over each token's visible positions; mass, where
// a token asks for it, += the softmax weights summed per block, per head. shares > 1: each
// token's span split that many ways (flash-decoding: long contexts, few (token, head) pairs),
// the partial results in `part` (n_tokens x n_head x shares x (head_dim + 2) floats) merged
// after; not with mass.
void attention(const std::byte* k_base, const std::byte* v_base, const KvGeometry& g,
               const float* k_channel, const int64_t* table, const AttnToken* tokens,
               int64_t n_tokens, int n_head, int n_head_kv, float scale, const float* q, float* out,
               float* mass, int shares, float* part, cudaStream_t s);

// ---- the roofline's ceilings (probe.cu) --------------------------------------------------
// GB/s reading `bytes` of device memory, the best of a few passes.
double read_bandwidth_gbs(size_t bytes);
// f32 GFLOP/s of chains of FMAs over every multiprocessor.
double peak_gflops_f32();

}  // namespace ferry::kernels::cuda
