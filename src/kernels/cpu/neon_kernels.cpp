// The aarch64 NEON kernel level. Advanced SIMD is part of the aarch64 baseline, so unlike the x86
// levels this needs no target pragma: the file is compiled for ARM targets only, and elsewhere
// neon_kernels() is nullptr so kernels.cpp never picks it.
//
// It follows x86_kernels.inc's shapes with 4-float vectors: float activations meet weights
// widened in a per-thread buffer (long batches) or in registers (short ones), with the same
// values and summation order on both paths so a token's output never depends on the batch; with
// 8-bit activations (FERRY_ACT_QUANT=1) Q4_0/Q4_1/Q8_0 blocks use integer dot products (SDOT
// where the target has it, widening multiplies otherwise).
#include "kernels/cpu/simd.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#include <cstring>

#include "kernels/cpu/neon_math.h"
#include "quant/block_formats.h"

namespace ferry::kernels::neon {
namespace {
using namespace ferry::quant;

using vf = float32x4_t;
constexpr int VL = 4;

inline vf vzero() {
    return vdupq_n_f32(0.0f);
}
inline vf vset1(float a) {
    return vdupq_n_f32(a);
}
// a * b + c, fused (the argument order of the x86 levels' vfma, not of vfmaq_f32).
inline vf vfma(vf a, vf b, vf c) {
    return vfmaq_f32(c, a, b);
}
inline float vhsum(vf a) {
    return vaddvq_f32(a);
}

inline float h2f(uint16_t h) {
    __fp16 f;
    std::memcpy(&f, &h, sizeof(f));
    return static_cast<float>(f);
}
inline vf vload_f16(const uint16_t* p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}
inline vf vload_bf16(const uint16_t* p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}
inline int64_t imin(int64_t a, int64_t b) {
    return a < b ? a : b;
}

// ---- activation quantization -------------------------------------------------------------
void quantize_q8a(const float* x, BlockQ8A* out, int64_t n) {
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        vf v[8];
        vf amax = vzero();
        uint32x4_t ordered = vdupq_n_u32(~0u);
        for (int i = 0; i < 8; ++i) {
            v[i] = vld1q_f32(x + 4 * i);
            amax = vmaxnmq_f32(amax, vabsq_f32(v[i]));  // maxnm: a NaN does not set the scale
            ordered = vandq_u32(ordered, vceqq_f32(v[i], v[i]));
        }
        float d = vmaxvq_f32(amax) / 127.0f;
        const float id = d > 0 ? 1.0f / d : 0.0f;
        // A NaN anywhere makes the whole block NaN, as the float dot product would.
        if (vminvq_u32(ordered) == 0) d = __builtin_nanf("");
        const vf vid = vset1(id);
        int32x4_t sum = vdupq_n_s32(0);
        int16x8_t q16[4];
        for (int i = 0; i < 4; ++i) {
            // Round to nearest even, as the reference's nearbyint.
            const int32x4_t a = vcvtnq_s32_f32(vmulq_f32(v[2 * i], vid));
            const int32x4_t c = vcvtnq_s32_f32(vmulq_f32(v[2 * i + 1], vid));
            sum = vaddq_s32(sum, vaddq_s32(a, c));
            q16[i] = vcombine_s16(vqmovn_s32(a), vqmovn_s32(c));
        }
        vst1q_s8(out[b].qs, vcombine_s8(vqmovn_s16(q16[0]), vqmovn_s16(q16[1])));
        vst1q_s8(out[b].qs + 16, vcombine_s8(vqmovn_s16(q16[2]), vqmovn_s16(q16[3])));
        out[b].d = d;
        out[b].s = d * static_cast<float>(vaddvq_s32(sum));
    }
}

// ---- integer matmul (weights x BlockQ8A activations) -----------------------------------
// sum over the 32 elements of w * x, four partial sums (exact in int32).
inline int32x4_t dot32(int8x16_t w0, int8x16_t w1, const int8_t* x) {
    const int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, x0), w1, x1);
#else
    int32x4_t a = vpaddlq_s16(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)));
    a = vpadalq_s16(a, vmull_s8(vget_high_s8(w0), vget_high_s8(x0)));
    a = vpadalq_s16(a, vmull_s8(vget_low_s8(w1), vget_low_s8(x1)));
    return vpadalq_s16(a, vmull_s8(vget_high_s8(w1), vget_high_s8(x1)));
#endif
}

// One block of a row as two s8 vectors (elements 0-15, 16-31) and its factors:
// dot = dw * dx * sum(w * qx) + mw * sx.
struct QBlock {
    int8x16_t w0, w1;
    float dw, mw;
};
inline QBlock unpack_q4_0(const uint8_t* row, int64_t b) {
    const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
    const uint8x16_t q = vld1q_u8(blk->qs);
    const float d = h2f(blk->d);
    // (q - 8): the offset rides on the activations' sum.
    return {vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))),
            vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), d, -8.0f * d};
}
inline QBlock unpack_q4_1(const uint8_t* row, int64_t b) {
    const BlockQ4_1* blk = reinterpret_cast<const BlockQ4_1*>(row) + b;
    const uint8x16_t q = vld1q_u8(blk->qs);
    return {vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))),
            vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), h2f(blk->d), h2f(blk->m)};
}
inline QBlock unpack_q8_0(const uint8_t* row, int64_t b) {
    const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    return {vld1q_s8(blk->qs), vld1q_s8(blk->qs + 16), h2f(blk->d), 0.0f};
}

constexpr int kQRowTile = 4, kQTokTile = 4;  // 16 float accumulators of 32 registers
// Tokens per cache block: their activations stay in L2 while the thread's rows stream past.
constexpr int64_t kTokBlock = 64;

template <QBlock (*Unpack)(const uint8_t*, int64_t), int RT, int TT>
void tile_q(const Weight& w, const BlockQ8A* xq, int64_t nbx, float* y, int64_t ldy, int64_t r,
            int64_t t0) {
    vf acc[RT][TT];
    float macc[RT][TT];
    for (int i = 0; i < RT; ++i)
        for (int t = 0; t < TT; ++t) acc[i][t] = vzero(), macc[i][t] = 0;
    for (int64_t b = 0; b < nbx; ++b) {
        QBlock wb[RT];
        for (int i = 0; i < RT; ++i) wb[i] = Unpack(w.row(r + i), b);
        for (int t = 0; t < TT; ++t) {
            const BlockQ8A* xb = xq + (t0 + t) * nbx + b;
            for (int i = 0; i < RT; ++i) {
                const int32x4_t p = dot32(wb[i].w0, wb[i].w1, xb->qs);
                acc[i][t] = vfma(vcvtq_f32_s32(p), vset1(wb[i].dw * xb->d), acc[i][t]);
                macc[i][t] += wb[i].mw * xb->s;
            }
        }
    }
    for (int i = 0; i < RT; ++i)
        for (int t = 0; t < TT; ++t) y[(t0 + t) * ldy + r + i] = vhsum(acc[i][t]) + macc[i][t];
}

template <QBlock (*Unpack)(const uint8_t*, int64_t)>
void matmul_q(const Weight& w, const BlockQ8A* xq, int64_t nt, float* y, int64_t ldy, int64_t r0,
              int64_t r1) {
    const int64_t nbx = w.cols / 32;
    for (int64_t tb = 0; tb < nt; tb += kTokBlock) {
        const int64_t te = imin(nt, tb + kTokBlock);
        int64_t r = r0;
        for (; r + kQRowTile <= r1; r += kQRowTile) {
            int64_t t = tb;
            for (; t + kQTokTile <= te; t += kQTokTile)
                tile_q<Unpack, kQRowTile, kQTokTile>(w, xq, nbx, y, ldy, r, t);
            for (; t < te; ++t) tile_q<Unpack, kQRowTile, 1>(w, xq, nbx, y, ldy, r, t);
        }
        for (; r < r1; ++r)
            for (int64_t t = tb; t < te; ++t) tile_q<Unpack, 1, 1>(w, xq, nbx, y, ldy, r, t);
    }
}

// ---- float matmul ----------------------------------------------------------------------
// Whether the float path has a widening for this type; others go to the reference (K-quants
// are widened by the reference dequantizer, then share the FMA tile).
bool float_path(DType t) {
    switch (t) {
        case DType::F32:
        case DType::F16:
        case DType::BF16:
        case DType::Q4_0:
        case DType::Q4_1:
        case DType::Q8_0:
        case DType::Q4_K:
        case DType::Q6_K:
            return true;
        default:
            return false;
    }
}

// Q4_0 / Q4_1 block b as 8 vectors of w = fma(q, d, m): the values both float paths use.
inline void unpack_q4_f(const uint8_t* row, bool q40, int64_t b, vf w[8]) {
    const uint8_t* qs;
    float d, m;
    if (q40) {
        const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
        qs = blk->qs, d = h2f(blk->d), m = -8.0f * d;
    } else {
        const BlockQ4_1* blk = reinterpret_cast<const BlockQ4_1*>(row) + b;
        qs = blk->qs, d = h2f(blk->d), m = h2f(blk->m);
    }
    const uint8x16_t q = vld1q_u8(qs);
    const uint8x16_t half[2] = {vandq_u8(q, vdupq_n_u8(0x0F)), vshrq_n_u8(q, 4)};
    const vf vd = vset1(d), vm = vset1(m);
    for (int h = 0; h < 2; ++h) {
        const uint16x8_t lo = vmovl_u8(vget_low_u8(half[h])), hi = vmovl_u8(vget_high_u8(half[h]));
        w[4 * h + 0] = vfma(vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo))), vd, vm);
        w[4 * h + 1] = vfma(vcvtq_f32_u32(vmovl_u16(vget_high_u16(lo))), vd, vm);
        w[4 * h + 2] = vfma(vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi))), vd, vm);
        w[4 * h + 3] = vfma(vcvtq_f32_u32(vmovl_u16(vget_high_u16(hi))), vd, vm);
    }
}

// Q8_0 block b as 8 vectors of w = q * d.
inline void unpack_q8_f(const uint8_t* row, int64_t b, vf w[8]) {
    const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    const vf vd = vset1(h2f(blk->d));
    for (int h = 0; h < 2; ++h) {
        const int8x16_t q = vld1q_s8(blk->qs + 16 * h);
        const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_s8(vget_high_s8(q));
        w[4 * h + 0] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), vd);
        w[4 * h + 1] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), vd);
        w[4 * h + 2] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), vd);
        w[4 * h + 3] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), vd);
    }
}

// Row r as floats: in place for F32, else widened into buf.
bool row_to_f32(const Weight& w, int64_t r, float* buf, const float** out) {
    const uint8_t* src = w.row(r);
    const int64_t n = w.cols;
    switch (w.type) {
        case DType::F32:
            *out = reinterpret_cast<const float*>(src);
            return true;
        case DType::F16:
        case DType::BF16: {
            const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
            const bool f16 = w.type == DType::F16;
            int64_t i = 0;
            for (; i + VL <= n; i += VL)
                vst1q_f32(buf + i, f16 ? vload_f16(h + i) : vload_bf16(h + i));
            for (; i < n; ++i) {
                const uint32_t bits = static_cast<uint32_t>(h[i]) << 16;
                float bf;
                std::memcpy(&bf, &bits, sizeof(bf));
                buf[i] = f16 ? h2f(h[i]) : bf;
            }
            break;
        }
        case DType::Q4_0:
        case DType::Q4_1:
        case DType::Q8_0:
            for (int64_t b = 0; b < n / 32; ++b) {
                vf v[8];
                if (w.type == DType::Q8_0)
                    unpack_q8_f(src, b, v);
                else
                    unpack_q4_f(src, w.type == DType::Q4_0, b, v);
                for (int k = 0; k < 8; ++k) vst1q_f32(buf + 32 * b + 4 * k, v[k]);
            }
            break;
        default:
            if (!dequantize_row_f32(w.type, src, buf, n)) return false;
            break;
    }
    *out = buf;
    return true;
}

constexpr int kRowTile = 4, kTokTile = 4;  // 16 accumulators + 4 weight vectors of 32 registers

template <int RT, int TT>
inline void tile_f(const float* const* wr, const float* x, int64_t n, float* y, int64_t ldy,
                   int64_t r, int64_t t0) {
    vf acc[RT][TT];
    for (int i = 0; i < RT; ++i)
        for (int t = 0; t < TT; ++t) acc[i][t] = vzero();
    int64_t k = 0;
    for (; k + VL <= n; k += VL) {
        vf wv[RT];
        for (int i = 0; i < RT; ++i) wv[i] = vld1q_f32(wr[i] + k);
        for (int t = 0; t < TT; ++t) {
            const vf xv = vld1q_f32(x + (t0 + t) * n + k);
            for (int i = 0; i < RT; ++i) acc[i][t] = vfma(wv[i], xv, acc[i][t]);
        }
    }
    for (int i = 0; i < RT; ++i)
        for (int t = 0; t < TT; ++t) {
            float s = vhsum(acc[i][t]);
            for (int64_t kk = k; kk < n; ++kk) s += wr[i][kk] * x[(t0 + t) * n + kk];
            y[(t0 + t) * ldy + r + i] = s;
        }
}

bool matmul_f(const Weight& w, const float* x, int64_t nt, float* y, int64_t ldy, int64_t r0,
              int64_t r1) {
    const int64_t n = w.cols;
    const int64_t ld = (n + 15) & ~int64_t{15};
    float* buf = scratch_floats(static_cast<size_t>(kRowTile * ld));
    for (int64_t tb = 0; tb < nt; tb += kTokBlock) {
        const int64_t te = imin(nt, tb + kTokBlock);
        for (int64_t r = r0; r < r1; r += kRowTile) {
            const int rt = static_cast<int>(imin(kRowTile, r1 - r));
            const float* wr[kRowTile];
            for (int i = 0; i < rt; ++i)
                if (!row_to_f32(w, r + i, buf + i * ld, &wr[i])) return false;
            if (rt == kRowTile) {
                int64_t t = tb;
                for (; t + kTokTile <= te; t += kTokTile)
                    tile_f<kRowTile, kTokTile>(wr, x, n, y, ldy, r, t);
                for (; t < te; ++t) tile_f<kRowTile, 1>(wr, x, n, y, ldy, r, t);
            } else {
                for (int i = 0; i < rt; ++i)
                    for (int64_t t = tb; t < te; ++t) tile_f<1, 1>(&wr[i], x, n, y, ldy, r + i, t);
            }
        }
    }
    return true;
}

// ---- 4-bit and 8-bit x float matmul for short batches --------------------------------------
// Decode widens blocks into registers and meets the activations there instead of going through
// matmul_f's buffer. The values and the order of the sums are exactly matmul_f's, so a token's
// output is bit-identical whichever path ran (batching and speculative verification never
// change a result).
constexpr int kShortRowTile = 2, kShortTokTile = 2;  // 4 accumulators + 16 weight vectors
constexpr int64_t kShortTokens = 4;

template <int RT, int TT>
inline void tile_short(const uint8_t* const* rows, DType type, const float* x, int64_t n, float* y,
                       int64_t ldy, int64_t r, int64_t t0) {
    vf acc[RT][TT];
    for (int i = 0; i < RT; ++i)
        for (int t = 0; t < TT; ++t) acc[i][t] = vzero();
    for (int64_t b = 0; b < n / 32; ++b) {
        vf w[RT][8];
        for (int i = 0; i < RT; ++i) {
            if (type == DType::Q8_0)
                unpack_q8_f(rows[i], b, w[i]);
            else
                unpack_q4_f(rows[i], type == DType::Q4_0, b, w[i]);
        }
        for (int t = 0; t < TT; ++t)
            for (int v = 0; v < 8; ++v) {
                const vf xv = vld1q_f32(x + (t0 + t) * n + 32 * b + v * VL);
                for (int i = 0; i < RT; ++i) acc[i][t] = vfma(w[i][v], xv, acc[i][t]);
            }
    }
    for (int i = 0; i < RT; ++i)
        for (int t = 0; t < TT; ++t) y[(t0 + t) * ldy + r + i] = vhsum(acc[i][t]);
}

void matmul_short(const Weight& w, const float* x, int64_t nt, float* y, int64_t ldy, int64_t r0,
                  int64_t r1) {
    const int64_t n = w.cols;
    int64_t r = r0;
    for (; r + kShortRowTile <= r1; r += kShortRowTile) {
        const uint8_t* rows[kShortRowTile];
        for (int i = 0; i < kShortRowTile; ++i) rows[i] = w.row(r + i);
        int64_t t = 0;
        for (; t + kShortTokTile <= nt; t += kShortTokTile)
            tile_short<kShortRowTile, kShortTokTile>(rows, w.type, x, n, y, ldy, r, t);
        for (; t < nt; ++t) tile_short<kShortRowTile, 1>(rows, w.type, x, n, y, ldy, r, t);
    }
    for (; r < r1; ++r) {
        const uint8_t* row = w.row(r);
        for (int64_t t = 0; t < nt; ++t) tile_short<1, 1>(&row, w.type, x, n, y, ldy, r, t);
    }
}

bool matmul_rows(const Weight& w, const float* x, const BlockQ8A* xq, int64_t nt, float* y,
                 int64_t ldy, int64_t r0, int64_t r1) {
    if (xq) {
        switch (w.type) {
            case DType::Q4_0:
                return matmul_q<unpack_q4_0>(w, xq, nt, y, ldy, r0, r1), true;
            case DType::Q4_1:
                return matmul_q<unpack_q4_1>(w, xq, nt, y, ldy, r0, r1), true;
            case DType::Q8_0:
                return matmul_q<unpack_q8_0>(w, xq, nt, y, ldy, r0, r1), true;
            default:
                break;  // no integer path: the float activations are there too
        }
    }
    if (!float_path(w.type)) return false;
    if ((w.type == DType::Q4_0 || w.type == DType::Q4_1 || w.type == DType::Q8_0) &&
        w.cols % 32 == 0 && nt <= kShortTokens)
        return matmul_short(w, x, nt, y, ldy, r0, r1), true;
    return matmul_f(w, x, nt, y, ldy, r0, r1);
}

// ---- elementwise ---------------------------------------------------------------------
void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps) {
    vf acc = vzero();
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        const vf v = vld1q_f32(x + i);
        acc = vfma(v, v, acc);
    }
    float ss = vhsum(acc);
    for (int64_t j = i; j < n; ++j) ss += x[j] * x[j];
    const float scale = 1.0f / __builtin_sqrtf(ss / static_cast<float>(n) + eps);
    const vf vs = vset1(scale);
    for (i = 0; i + VL <= n; i += VL)
        vst1q_f32(out + i, vmulq_f32(vmulq_f32(vld1q_f32(x + i), vs), vld1q_f32(weight + i)));
    for (; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void silu_mul(float* gate, const float* up, int64_t n) {
    int64_t i = 0;
    const vf one = vset1(1.0f);
    for (; i + VL <= n; i += VL) {
        const vf g = vld1q_f32(gate + i);
        const vf e = vexp(vnegq_f32(g));
        vst1q_f32(gate + i, vmulq_f32(vdivq_f32(g, vaddq_f32(one, e)), vld1q_f32(up + i)));
    }
    for (; i < n; ++i) gate[i] = gate[i] / (1.0f + __builtin_expf(-gate[i])) * up[i];
}

void softmax(float* x, int64_t n) {
    vf mv = vset1(-__builtin_inff());
    int64_t i = 0;
    for (; i + VL <= n; i += VL) mv = vmaxq_f32(mv, vld1q_f32(x + i));
    float mx = vmaxvq_f32(mv);
    for (int64_t j = i; j < n; ++j) mx = x[j] > mx ? x[j] : mx;
    vf sv = vzero();
    const vf vm = vset1(mx);
    for (i = 0; i + VL <= n; i += VL) {
        const vf e = vexp(vsubq_f32(vld1q_f32(x + i), vm));
        vst1q_f32(x + i, e);
        sv = vaddq_f32(sv, e);
    }
    float sum = vhsum(sv);
    for (; i < n; ++i) {
        x[i] = __builtin_expf(x[i] - mx);
        sum += x[i];
    }
    const vf inv = vset1(1.0f / sum);
    for (i = 0; i + VL <= n; i += VL) vst1q_f32(x + i, vmulq_f32(vld1q_f32(x + i), inv));
    for (; i < n; ++i) x[i] *= 1.0f / sum;
}

// Online softmax over blocks of positions: one max/rescale per block instead of per position.
// q and the running output live in local arrays (head_dim up to kMaxHeadDim), registers for
// the small head dims.
constexpr int kMaxHeadDim = 256;
bool attend(const float* q, const float* k, const float* v, size_t stride, int64_t n_kv,
            int head_dim, float scale, float* out) {
    if (head_dim % VL != 0 || head_dim > kMaxHeadDim) return false;
    const int nv = head_dim / VL;
    constexpr int kBlock = 16;
    vf qv[kMaxHeadDim / VL], acc[kMaxHeadDim / VL];
    for (int c = 0; c < nv; ++c) {
        qv[c] = vmulq_f32(vld1q_f32(q + c * VL), vset1(scale));
        acc[c] = vzero();
    }
    float m = -__builtin_inff(), l = 0;
    for (int64_t p0 = 0; p0 < n_kv; p0 += kBlock) {
        const int nb = static_cast<int>(imin(kBlock, n_kv - p0));
        float s[kBlock];
        float bm = -__builtin_inff();
        for (int j = 0; j < nb; ++j) {
            const float* kp = k + (p0 + j) * stride;
            vf d = vmulq_f32(qv[0], vld1q_f32(kp));
            for (int c = 1; c < nv; ++c) d = vfma(qv[c], vld1q_f32(kp + c * VL), d);
            s[j] = vhsum(d);
            bm = s[j] > bm ? s[j] : bm;
        }
        const float m_new = bm > m ? bm : m;
        if (m_new == -__builtin_inff()) continue;  // every score -inf so far: nothing to add
        const float corr = __builtin_expf(m - m_new);
        l *= corr;
        const vf vc = vset1(corr);
        for (int c = 0; c < nv; ++c) acc[c] = vmulq_f32(acc[c], vc);
        for (int j = 0; j < nb; ++j) {
            const float wj = __builtin_expf(s[j] - m_new);
            l += wj;
            const float* vp = v + (p0 + j) * stride;
            const vf vw = vset1(wj);
            for (int c = 0; c < nv; ++c) acc[c] = vfma(vw, vld1q_f32(vp + c * VL), acc[c]);
        }
        m = m_new;
    }
    const vf inv = vset1(l > 0 ? 1.0f / l : 0.0f);
    for (int c = 0; c < nv; ++c) vst1q_f32(out + c * VL, vmulq_f32(acc[c], inv));
    return true;
}

// Optional entries this level has no path for (w8a8's pair) stay nullptr, so kernels.cpp uses
// the reference for them.
constexpr LevelKernels make_table() {
    LevelKernels t{};
    t.quantize_q8a = quantize_q8a;
    t.matmul_rows = matmul_rows;
    t.rmsnorm = rmsnorm;
    t.silu_mul = silu_mul;
    t.softmax = softmax;
    t.attend = attend;
    return t;
}

}  // namespace

constexpr LevelKernels kTable = make_table();
}  // namespace ferry::kernels::neon

namespace ferry::kernels {
const LevelKernels* neon_kernels() {
    return &neon::kTable;
}
}  // namespace ferry::kernels
#else
namespace ferry::kernels {
const LevelKernels* neon_kernels() {
    return nullptr;
}
}  // namespace ferry::kernels
#endif
