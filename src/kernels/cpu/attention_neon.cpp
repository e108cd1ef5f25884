// The aarch64 NEON body of attend_paged_rows, under the contract of attention_x86.inc: each
// row's result is a fixed function of its own query, positions and scale, whatever the block
// size, the other rows of the call or the thread count. Three passes per call:
//   1. scores: each key row is converted once (f16, int8, fp8 to floats; f32 is read in place)
//      and dotted with the query of every row that reaches that position;
//   2. per row: max, e = exp((s - max) * scale), l = sum e, in position order;
//   3. out_r = (sum_p e[r][p] v_p) / l, a chunk of value rows converted once for all rows.
// A row's arithmetic is the same sequence whatever else is in the call: positions are walked in
// order from 0, a vector never mixes rows, and which lanes are vector or scalar tail depends
// only on head_dim and the row's own position count.
// Per-token scales stay out of the inner loops: a key's scale multiplies its score, a value's
// its softmax weight; int8 keys' per-channel scales are folded into the query once per row.
#include "kernels/cpu/attention_neon.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#include <cstring>

#include "kernels/cpu/neon_math.h"

namespace ferry::kernels::cpu::neon {
namespace {
using quant::KvDType;
using vf = float32x4_t;
constexpr int VL = 4;
// FP8 rows are converted to value / 256 (E4M3 is fp16 with a 4-bit exponent and 3-bit mantissa,
// so moving the bits up is exact, subnormals included, and the exponent bias 7 vs 15 is a
// factor 256); the 256 is folded into the row's scale.
constexpr float kFp8Unit = 256.0f;

// Eight elements of a 16-bit or 8-bit cache type as floats.
inline void convert8(KvDType t, const uint8_t* p, float* out) {
    float16x8_t h;
    if (t == KvDType::Int8) {
        const int16x8_t w = vmovl_s8(vld1_s8(reinterpret_cast<const int8_t*>(p)));
        vst1q_f32(out, vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))));
        vst1q_f32(out + 4, vcvtq_f32_s32(vmovl_s16(vget_high_s16(w))));
        return;
    }
    if (t == KvDType::FP8) {
        const uint16x8_t w = vmovl_u8(vld1_u8(p));
        const uint16x8_t mag = vandq_u16(w, vdupq_n_u16(0x7F));
        const uint16x8_t bits =
            vorrq_u16(vshlq_n_u16(mag, 7), vshlq_n_u16(vandq_u16(w, vdupq_n_u16(0x80)), 8));
        // The NaN code (S.1111.111) would become 480 / 256: made an fp16 NaN instead.
        h = vreinterpretq_f16_u16(
            vbslq_u16(vceqq_u16(mag, vdupq_n_u16(0x7F)), vdupq_n_u16(0x7E00), bits));
    } else {
        h = vreinterpretq_f16_u16(vld1q_u16(reinterpret_cast<const uint16_t*>(p)));
    }
    vst1q_f32(out, vcvt_f32_f16(vget_low_f16(h)));
    vst1q_f32(out + 4, vcvt_high_f32_f16(h));
}

// A row of hd elements as floats: f32 in place, the other types converted into dst.
inline const float* row_floats(KvDType t, size_t eb, const uint8_t* p, int hd, float* dst) {
    if (t == KvDType::F32) return reinterpret_cast<const float*>(p);
    int i = 0;
    for (; i + 8 <= hd; i += 8) convert8(t, p + i * eb, dst + i);
    if (i < hd) {  // through a zero-padded copy: nothing past the row is read
        uint8_t tmp[16] = {};
        std::memcpy(tmp, p + i * eb, (hd - i) * eb);
        float f[8];
        convert8(t, tmp, f);
        std::memcpy(dst + i, f, (hd - i) * sizeof(float));
    }
    return dst;
}

inline float dot(const float* q, const float* k, int hd) {
    vf a0 = vdupq_n_f32(0.0f), a1 = vdupq_n_f32(0.0f);  // two chains: FMA latency
    int d = 0;
    for (; d + 2 * VL <= hd; d += 2 * VL) {
        a0 = vfmaq_f32(a0, vld1q_f32(q + d), vld1q_f32(k + d));
        a1 = vfmaq_f32(a1, vld1q_f32(q + d + VL), vld1q_f32(k + d + VL));
    }
    if (d + VL <= hd) {
        a0 = vfmaq_f32(a0, vld1q_f32(q + d), vld1q_f32(k + d));
        d += VL;
    }
    float s = vaddvq_f32(vaddq_f32(a0, a1));
    for (; d < hd; ++d) s += q[d] * k[d];
    return s;
}

// acc[0..hd) += sum over j < n of w[j] * v[j][0..hd), in j order for every element.
inline void accumulate(float* acc, const float* w, const float* const* v, int n, int hd) {
    int d = 0;
    for (; d + 4 * VL <= hd; d += 4 * VL) {
        vf a[4];
        for (int s = 0; s < 4; ++s) a[s] = vld1q_f32(acc + d + s * VL);
        for (int j = 0; j < n; ++j) {
            const vf wj = vdupq_n_f32(w[j]);
            for (int s = 0; s < 4; ++s) a[s] = vfmaq_f32(a[s], wj, vld1q_f32(v[j] + d + s * VL));
        }
        for (int s = 0; s < 4; ++s) vst1q_f32(acc + d + s * VL, a[s]);
    }
    for (; d + VL <= hd; d += VL) {
        vf a = vld1q_f32(acc + d);
        for (int j = 0; j < n; ++j) a = vfmaq_f32(a, vdupq_n_f32(w[j]), vld1q_f32(v[j] + d));
        vst1q_f32(acc + d, a);
    }
    for (; d < hd; ++d) {
        float a = acc[d];
        for (int j = 0; j < n; ++j) a += w[j] * v[j][d];
        acc[d] = a;
    }
}

// Walks positions p, p + 1, ... of one KV head over the blocks (from block p / block_size, slot
// p % block_size) without a division per position.
struct PosCursor {
    const void* const* blocks;
    int block_size;
    size_t stride, offset;  // bytes
    size_t scale_off;       // bytes from a block's start to its per-token scales
    int scales_per_pos, scale_index;
    int64_t block = 0;
    int slot = 0;
    // The position's row; with `scale`, also its per-token scale.
    const uint8_t* next(float* scale) {
        const uint8_t* b = static_cast<const uint8_t*>(blocks[block]);
        if (scale)
            std::memcpy(
                scale,
                b + scale_off +
                    (static_cast<size_t>(slot) * scales_per_pos + scale_index) * sizeof(float),
                sizeof(float));
        const uint8_t* p = b + slot * stride + offset;
        if (++slot == block_size) slot = 0, ++block;
        return p;
    }
};

// Prefetches, into L2, the rows kPrefetchAhead positions ahead of a pass: a decode batch's
// 16-slot blocks are runs too short for the hardware prefetcher (attention_x86.inc has the
// measurement, on x86; this distance is that one, not measured on ARM).
constexpr int kPrefetchAhead = 64;
struct Prefetcher {
    PosCursor c;
    int64_t pos = 0, n;
    int row_bytes;
    void upto(int64_t until) {
        if (until > n) until = n;
        for (; pos < until; ++pos) {
            const uint8_t* p = c.next(nullptr);
            for (int b = 0; b < row_bytes; b += 64) __builtin_prefetch(p + b, 0, 2);
        }
    }
};

// Value rows converted per chunk: they stay in L1 while every row of the call takes them.
constexpr int kValueChunk = 32;
static_assert(kValueChunk <= 32, "attend_rows_scratch_floats stages 32 value rows");

// A draft tree row's softmax sum, added as its branch run as a chain adds it (see
// attention_x86.inc's branch_sum): bit-identical, so a tree verifies as plain decoding decodes.
inline float branch_sum(const float* e, int64_t p_vec, const AttnRow& row) {
    const int64_t t_vec = row.tree_start / VL * VL;
    const int64_t base = t_vec > p_vec ? t_vec : p_vec;
    vf sum = vdupq_n_f32(0.0f);
    for (int64_t p = p_vec; p < base; p += VL) sum = vaddq_f32(sum, vld1q_f32(e + p));
    float tail[2 * VL + 64] = {};
    int m = 0;
    for (int64_t p = base; p < row.tree_start; ++p) tail[m++] = e[p];
    for (int64_t p = row.tree_start; p < row.n_kv; ++p)
        if ((row.tree_mask >> (p - row.tree_start)) & 1) tail[m++] = e[p];
    for (int i = 0; i < m; i += VL) sum = vaddq_f32(sum, vld1q_f32(tail + i));
    return vaddvq_f32(sum);
}

void attend_rows(const AttnRow* rows, int nr, const PagedKvView& kv, int hd, float scale,
                 float* scratch) {
    const KvDType t = kv.dtype;
    const size_t eb = quant::kv_elem_bytes(t);
    const bool k_scaled = quant::kv_token_scales(t, true);
    const bool v_scaled = quant::kv_token_scales(t, false);
    const float unit = t == KvDType::FP8 ? kFp8Unit : 1.0f;
    const size_t scale_off = kv.scale_offset;
    const float* cs = kv.k_channel_scale;
    const int hdp = (hd + 15) / 16 * 16;
    int64_t nmax = 0, p_begin = rows[0].kv_start;
    for (int r = 0; r < nr; ++r) {
        nmax = rows[r].n_kv > nmax ? rows[r].n_kv : nmax;
        p_begin = rows[r].kv_start < p_begin ? rows[r].kv_start : p_begin;
    }
    // Positions before every row's window are never read (attention_x86.inc says why).
    const int64_t sstride = (nmax + 15) / 16 * 16;
    // The layout attend_rows_scratch_floats sizes: scores, queries, accumulators, then 16 key
    // rows (one used here) and 32 value rows.
    float* scores = scratch;
    float* qbuf = scores + nr * sstride;
    float* acc = qbuf + nr * hdp;
    float* kstage = acc + nr * hdp;
    float* vstage = kstage + 16 * hdp;
    for (int r = 0; r < nr; ++r)
        for (int d = 0; d < hd; ++d) {
            qbuf[r * hdp + d] = cs ? rows[r].q[d] * cs[d] : rows[r].q[d];
            acc[r * hdp + d] = 0.0f;
        }

    // Pass 1: raw scores (times the key's scale).
    // A cursor over the keys' or the values' rows, at the first position read.
    auto cursor_at_begin = [&](const void* const* blocks) {
        return PosCursor{blocks,
                         kv.block_size,
                         kv.stride * eb,
                         kv.head_offset * eb,
                         scale_off,
                         kv.scales_per_pos,
                         kv.scale_index,
                         p_begin / kv.block_size,
                         static_cast<int>(p_begin % kv.block_size)};
    };
    PosCursor kc = cursor_at_begin(kv.k_blocks);
    const int row_bytes = static_cast<int>(hd * eb);
    Prefetcher kpre{kc, p_begin, nmax, row_bytes};
    for (int64_t p = p_begin; p < nmax; ++p) {
        if (p % 8 == 0) kpre.upto(p + 8 + kPrefetchAhead);
        float ks = 1.0f;
        const float* k = row_floats(t, eb, kc.next(k_scaled ? &ks : nullptr), hd, kstage);
        ks *= unit;
        for (int r = 0; r < nr; ++r) {
            if (p >= rows[r].n_kv) continue;
            const float s = dot(qbuf + r * hdp, k, hd);
            scores[r * sstride + p] = k_scaled ? s * ks : s;
        }
    }

    PosCursor vc = cursor_at_begin(kv.v_blocks);
    Prefetcher vpre{vc, p_begin, nmax, row_bytes};
    vpre.upto(p_begin + kPrefetchAhead);  // while pass 2 computes

    // Pass 2: unnormalised weights and their sum per row. Lanes past n_kv are set to -inf
    // first, so whole vectors are used and those lanes add exactly 0.
    float inv_sum[kMaxAttendRows];
    const vf vscale = vdupq_n_f32(scale);
    for (int r = 0; r < nr; ++r) {
        const int64_t n = rows[r].n_kv;
        float* s = scores + r * sstride;
        const int64_t nvec = (n + VL - 1) / VL * VL;
        const int64_t p_vec = p_begin / VL * VL;  // the call's first vector of scores
        for (int64_t p = n; p < nvec; ++p) s[p] = -__builtin_inff();
        for (int64_t p = p_vec; p < rows[r].kv_start; ++p) s[p] = -__builtin_inff();  // window
        if (rows[r].tree_start >= 0)  // a draft tree: other branches' tokens weigh nothing
            for (int64_t p = rows[r].tree_start; p < n; ++p)
                if (((rows[r].tree_mask >> (p - rows[r].tree_start)) & 1) == 0)
                    s[p] = -__builtin_inff();
        vf mv = vdupq_n_f32(-__builtin_inff());
        for (int64_t p = p_vec; p < nvec; p += VL) mv = vmaxq_f32(mv, vld1q_f32(s + p));
        const vf m = vdupq_n_f32(vmaxvq_f32(mv));
        vf sum = vdupq_n_f32(0.0f);
        for (int64_t p = p_vec; p < nvec; p += VL) {
            const vf e = vexp(vmulq_f32(vsubq_f32(vld1q_f32(s + p), m), vscale));
            vst1q_f32(s + p, e);
            sum = vaddq_f32(sum, e);
        }
        const float l = rows[r].tree_start >= 0 ? branch_sum(s, p_vec, rows[r]) : vaddvq_f32(sum);
        inv_sum[r] = l > 0 ? 1.0f / l : 0.0f;
        if (float* mass = rows[r].mass)  // H2O's block scores: the weights, block by block
            for (int64_t p = rows[r].kv_start; p < n; ++p)
                mass[p / kv.block_size] += s[p] * inv_sum[r];
    }

    // Pass 3: weighted sum of values, kValueChunk positions at a time.
    const float* vp[kValueChunk];
    float vsc[kValueChunk], wsc[kValueChunk];
    for (int64_t p0 = p_begin; p0 < nmax; p0 += kValueChunk) {
        vpre.upto(p0 + kValueChunk + kPrefetchAhead);
        const int np = static_cast<int>(nmax - p0 < kValueChunk ? nmax - p0 : kValueChunk);
        for (int j = 0; j < np; ++j) {
            vsc[j] = 1.0f;
            vp[j] = row_floats(t, eb, vc.next(v_scaled ? &vsc[j] : nullptr), hd, vstage + j * hdp);
            vsc[j] *= unit;
        }
        for (int r = 0; r < nr; ++r) {
            const int64_t left = rows[r].n_kv - p0;
            const int n = static_cast<int>(left < np ? left : np);
            if (n <= 0) continue;
            const float* w = scores + r * sstride + p0;
            if (v_scaled) {
                for (int j = 0; j < n; ++j) wsc[j] = w[j] * vsc[j];
                w = wsc;
            }
            accumulate(acc + r * hdp, w, vp, n, hd);
        }
    }

    for (int r = 0; r < nr; ++r) {
        const float* a = acc + r * hdp;
        float* out = rows[r].out;
        int d = 0;
        for (; d + VL <= hd; d += VL)
            vst1q_f32(out + d, vmulq_f32(vld1q_f32(a + d), vdupq_n_f32(inv_sum[r])));
        for (; d < hd; ++d) out[d] = a[d] * inv_sum[r];
    }
}

}  // namespace
}  // namespace ferry::kernels::cpu::neon

namespace ferry::kernels::cpu {
AttendRowsFn neon_attend_rows() {
    return neon::attend_rows;
}
}  // namespace ferry::kernels::cpu
#else
namespace ferry::kernels::cpu {
AttendRowsFn neon_attend_rows() {
    return nullptr;
}
}  // namespace ferry::kernels::cpu
#endif
