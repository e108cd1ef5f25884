// The aarch64 NEON kernel level. Advanced SIMD is part of the aarch64 baseline, so unlike the x86
// levels this needs no target pragma: the file is compiled for ARM targets only, and elsewhere
// neon_kernels() is nullptr so kernels.cpp never picks it.
//
// It follows x86_kernels.inc's shapes with 4-float vectors: float activations meet weights
// widened in a per-thread buffer (long batches) or in registers (short ones), with the same
// values and summation order on both paths so a token's output never depends on the batch; with
// integer activations (Activations::Int16 / Int8, the default) the block types and int4 use
// integer dot products over the packed layout (SDOT where the target has it, widening
// multiplies otherwise).
#include "kernels/cpu/simd.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#include <cstring>

#include "kernels/cpu/neon_math.h"
#include "kernels/cpu/packed_weights.h"
#include "quant/block_formats.h"

namespace ferry::kernels::cpu::neon {
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
// ref::quantize_act, vectorized: the same d, the same v (vcvtnq rounds to nearest even, as
// nearbyint does), the same planes.
void quantize_act(const float* x, ActBlock* out, int64_t n, Activations a) {
    const bool wide = a == Activations::Int16;
    const float vmax = wide ? static_cast<float>(kActMax16) : static_cast<float>(kActMax8);
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        ActBlock& o = out[b];
        vf v[8];
        vf amax = vzero();
        uint32x4_t finite = vdupq_n_u32(~0u);
        for (int i = 0; i < 8; ++i) {
            v[i] = vld1q_f32(x + 4 * i);
            const vf av = vabsq_f32(v[i]);
            amax = vmaxq_f32(amax, av);
            finite = vandq_u32(finite, vcleq_f32(av, vset1(__FLT_MAX__)));  // false for NaN
        }
        if (vminvq_u32(finite) == 0) {
            std::memset(&o, 0, sizeof(o));
            o.d = o.sx = __builtin_nanf("");
            continue;
        }
        const float d = vmaxvq_f32(amax) / vmax;
        float id = d > 0 ? 1.0f / d : 0.0f;
        if (!(id <= __FLT_MAX__)) id = 0;  // as the reference: a denormal step rounds to zero
        const vf vid = vset1(id);
        int32x4_t sum = vdupq_n_s32(0);
        int32_t s_lo = 0;
        int16x8_t hi16[4], lo16[4];
        for (int i = 0; i < 4; ++i) {
            if (i == 2) s_lo = vaddvq_s32(sum);  // the first 16 values
            int32x4_t q[2], hi[2], lo[2];
            for (int k = 0; k < 2; ++k) {
                q[k] = vcvtnq_s32_f32(vmulq_f32(v[2 * i + k], vid));
                sum = vaddq_s32(sum, q[k]);
                if (wide) {
                    hi[k] = vshrq_n_s32(vaddq_s32(q[k], vdupq_n_s32(64)), 7);
                    lo[k] = vsubq_s32(q[k], vshlq_n_s32(hi[k], 7));
                } else {
                    hi[k] = q[k];
                    lo[k] = vdupq_n_s32(0);
                }
            }
            hi16[i] = vcombine_s16(vqmovn_s32(hi[0]), vqmovn_s32(hi[1]));
            lo16[i] = vcombine_s16(vqmovn_s32(lo[0]), vqmovn_s32(lo[1]));
        }
        vst1q_s8(o.hi, vcombine_s8(vqmovn_s16(hi16[0]), vqmovn_s16(hi16[1])));
        vst1q_s8(o.hi + 16, vcombine_s8(vqmovn_s16(hi16[2]), vqmovn_s16(hi16[3])));
        vst1q_s8(o.lo, vcombine_s8(vqmovn_s16(lo16[0]), vqmovn_s16(lo16[1])));
        vst1q_s8(o.lo + 16, vcombine_s8(vqmovn_s16(lo16[2]), vqmovn_s16(lo16[3])));
        const int32_t s = vaddvq_s32(sum);
        o.d = d;
        o.s = s;
        o.s_lo = s_lo;
        o.sx = d * static_cast<float>(s);
    }
}

// ---- integer matmul over packed weights (kernels/cpu/packed_weights.h)
// ---------------------------- A 16-row group is four vectors of 4 rows (4 bytes each) per 64-byte
// chunk; each meets 4 activation bytes broadcast to every lane. Per block the exact integer sums,
// then ref::dot_act's float steps in its order, so the result is the reference's bit for bit.

// acc[lane i] += sum over k < 4 of w[4i + k] * x[k] (x: 4 bytes broadcast to every lane).
inline int32x4_t dot4(int32x4_t acc, int8x16_t w, int8x16_t x) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, w, x);
#else
    // |w * x| <= 128 * 127 fits int16; pairs, then pairs of pairs per row.
    const int32x4_t lo = vpaddlq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(x)));
    const int32x4_t hi = vpaddlq_s16(vmull_high_s8(w, x));
    return vaddq_s32(acc, vpaddq_s32(lo, hi));
#endif
}
inline int8x16_t bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return vreinterpretq_s8_s32(vdupq_n_s32(v));
}

// 4 bytes (one per row of a quad) widened to 32 bits, or to floats.
inline uint32x4_t u8x4_to_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return vmovl_u16(vget_low_u16(vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(v)))));
}
inline vf u8x4_to_f32(const uint8_t* p) {
    return vcvtq_f32_u32(u8x4_to_u32(p));
}
inline vf i8x4_to_f32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_u32(vdup_n_u32(v))))));
}

template <DType T, bool k16>
void group_packed(const uint8_t* tiles, int64_t n_tiles, const ActBlock* x, float* y, int n_rows) {
    constexpr bool kQ8 = T == DType::Q8_0, kQ6 = T == DType::Q6_K, kQ5 = packed_q5(T);
    constexpr bool kK = packed_tile_cols(T) == 256;
    constexpr bool kKMin = T == DType::Q4_K || T == DType::Q5_K;  // 6-bit scales under d, dmin
    constexpr bool kMin = T == DType::Q4_1 || T == DType::Q5_1 || kKMin;
    constexpr int32_t kOffset = T == DType::Q4_0 ? 8 : T == DType::Q5_0 ? 16 : 0;  // q - offset
    using KScales = PackedKScales<packed_block_bytes(T)>;
    constexpr int kBlocks = kK ? 8 : 1, kBlockBytes = packed_block_bytes(T);
    constexpr size_t kTile = packed_tile_bytes(T);
    auto off = [](int v) { return packed_act_offset(T, v); };
    vf facc[4], macc[4];
    for (int q = 0; q < 4; ++q) facc[q] = macc[q] = vzero();
    for (int64_t ti = 0; ti < n_tiles; ++ti) {
        const uint8_t* tp = tiles + ti * kTile;
        for (int b = 0; b < kBlocks; ++b) {
            const uint8_t* bp = tp + b * kBlockBytes;
            const ActBlock& a = x[ti * kBlocks + b];
            for (int q = 0; q < 4; ++q) {
                int8x16_t w[8];
                if constexpr (kQ8) {
                    // Back to signed bytes: sdot multiplies w, not w + 128.
                    for (int c = 0; c < 8; ++c)
                        w[c] = vreinterpretq_s8_u8(
                            veorq_u8(vld1q_u8(bp + 64 * c + 16 * q), vdupq_n_u8(0x80)));
                } else {
                    for (int c = 0; c < 4; ++c) {
                        const uint8x16_t v = vld1q_u8(bp + 64 * c + 16 * q);
                        uint8x16_t lo = vandq_u8(v, vdupq_n_u8(0x0F)), hi = vshrq_n_u8(v, 4);
                        if constexpr (kQ5) {
                            // Fifth bits: bit v of the chunk's bytes belongs to vector v, shifted
                            // to bit 4 (a negative count shifts right).
                            const uint8x16_t h = vld1q_u8(bp + kPackedQ5High + 16 * q);
                            const uint8x16_t m = vdupq_n_u8(0x10);
                            lo = vorrq_u8(lo, vandq_u8(vshlq_u8(h, vdupq_n_s8(4 - 2 * c)), m));
                            hi = vorrq_u8(hi, vandq_u8(vshlq_u8(h, vdupq_n_s8(3 - 2 * c)), m));
                        }
                        if constexpr (kQ6) {
                            // High 2 bits: chunk g's bits 2t, 2t+1 belong to vector 4g + t.
                            const int g = c / 2, t = 2 * (c % 2);
                            const uint8x16_t h = vld1q_u8(bp + kPackedQ6High + 64 * g + 16 * q);
                            const uint8x16_t m = vdupq_n_u8(0x30);
                            if (t == 0) {
                                lo = vorrq_u8(lo, vandq_u8(vshlq_n_u8(h, 4), m));
                                hi = vorrq_u8(hi, vandq_u8(vshlq_n_u8(h, 2), m));
                            } else {
                                lo = vorrq_u8(lo, vandq_u8(h, m));
                                hi = vorrq_u8(hi, vandq_u8(vshrq_n_u8(h, 2), m));
                            }
                        }
                        w[2 * c] = vreinterpretq_s8_u8(lo);
                        w[2 * c + 1] = vreinterpretq_s8_u8(hi);
                    }
                }
                // Integer sums of even and odd vectors apart (Q6_K's two 16-element
                // sub-blocks); exact, so their order does not matter.
                int32x4_t pe = vdupq_n_s32(0), po = pe, le = pe, lo = pe;
                for (int v = 0; v < 8; v += 2) {
                    pe = dot4(pe, w[v], bcast4(a.hi + off(v)));
                    po = dot4(po, w[v + 1], bcast4(a.hi + off(v + 1)));
                    if constexpr (k16) {
                        le = dot4(le, w[v], bcast4(a.lo + off(v)));
                        lo = dot4(lo, w[v + 1], bcast4(a.lo + off(v + 1)));
                    }
                }
                const vf dx = vset1(a.d);
                if constexpr (kQ6) {
                    if constexpr (k16) {
                        pe = vaddq_s32(vshlq_n_s32(pe, 7), le);
                        po = vaddq_s32(vshlq_n_s32(po, 7), lo);
                    }
                    pe = vsubq_s32(pe, vdupq_n_s32(32 * a.s_lo));
                    po = vsubq_s32(po, vdupq_n_s32(32 * (a.s - a.s_lo)));
                    const uint8_t* scales = tp + PackedQ6K::scales + 32 * b + 4 * q;
                    const vf dsup =
                        vload_f16(reinterpret_cast<const uint16_t*>(tp + PackedQ6K::d) + 4 * q);
                    const vf de = vmulq_f32(i8x4_to_f32(scales), dsup);
                    const vf dodd = vmulq_f32(i8x4_to_f32(scales + 16), dsup);
                    facc[q] = vfmaq_f32(facc[q], vcvtq_f32_s32(pe), vmulq_f32(de, dx));
                    facc[q] = vfmaq_f32(facc[q], vcvtq_f32_s32(po), vmulq_f32(dodd, dx));
                    continue;
                }
                int32x4_t p = vaddq_s32(pe, po);
                if constexpr (k16) p = vaddq_s32(vshlq_n_s32(p, 7), vaddq_s32(le, lo));
                if constexpr (kOffset != 0) p = vsubq_s32(p, vdupq_n_s32(kOffset * a.s));
                if constexpr (packed_int4(T))  // q - z per row
                    p = vmlsq_n_s32(
                        p, vreinterpretq_s32_u32(u8x4_to_u32(tp + kPackedInt4Zero + 4 * q)), a.s);
                vf dw, mw = vzero();
                if constexpr (kKMin) {
                    const uint16_t* dd = reinterpret_cast<const uint16_t*>(tp + KScales::d);
                    const uint16_t* dm = reinterpret_cast<const uint16_t*>(tp + KScales::dmin);
                    dw = vmulq_f32(u8x4_to_f32(tp + KScales::sc + 16 * b + 4 * q),
                                   vload_f16(dd + 4 * q));
                    mw = vmulq_f32(u8x4_to_f32(tp + KScales::m + 16 * b + 4 * q),
                                   vload_f16(dm + 4 * q));
                } else {
                    const uint16_t* sc =
                        reinterpret_cast<const uint16_t*>(tp + packed_scales_offset(T));
                    dw = vload_f16(sc + 4 * q);
                    if constexpr (kMin) mw = vload_f16(sc + 16 + 4 * q);
                }
                facc[q] = vfmaq_f32(facc[q], vcvtq_f32_s32(p), vmulq_f32(dw, dx));
                if constexpr (kMin) macc[q] = vfmaq_f32(macc[q], mw, vset1(a.sx));
            }
        }
    }
    float out[16];
    for (int q = 0; q < 4; ++q)
        vst1q_f32(out + 4 * q, kKMin  ? vsubq_f32(facc[q], macc[q])
                               : kMin ? vaddq_f32(facc[q], macc[q])
                                      : facc[q]);
    for (int i = 0; i < n_rows; ++i) y[i] = out[i];
}

template <DType T, bool k16>
void matmul_packed_t(const Weight& w, const ActBlock* x, int64_t nt, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
    const int64_t n_tiles = w.cols / packed_tile_cols(T), nbx = w.cols / 32;
    constexpr size_t kTile = packed_tile_bytes(T);
    for (int64_t r = r0; r < r1; r += kPackRows) {
        const uint8_t* tiles = w.packed + static_cast<size_t>(r / kPackRows * n_tiles) * kTile;
        const int n_rows = static_cast<int>(imin(kPackRows, r1 - r));
        for (int64_t t = 0; t < nt; ++t)
            group_packed<T, k16>(tiles, n_tiles, x + t * nbx, y + t * ldy + r, n_rows);
    }
}

template <DType T>
void matmul_packed_a(const Weight& w, const ActBlock* x, Activations a, int64_t nt, float* y,
                     int64_t ldy, int64_t r0, int64_t r1) {
    if (a == Activations::Int16)
        matmul_packed_t<T, true>(w, x, nt, y, ldy, r0, r1);
    else
        matmul_packed_t<T, false>(w, x, nt, y, ldy, r0, r1);
}

bool matmul_packed(const Weight& w, const ActBlock* x, Activations a, int64_t nt, float* y,
                   int64_t ldy, int64_t r0, int64_t r1) {
    switch (w.type) {
        case DType::Q4_0:
            return matmul_packed_a<DType::Q4_0>(w, x, a, nt, y, ldy, r0, r1), true;
        case DType::Q4_1:
            return matmul_packed_a<DType::Q4_1>(w, x, a, nt, y, ldy, r0, r1), true;
        case DType::Q5_0:
            return matmul_packed_a<DType::Q5_0>(w, x, a, nt, y, ldy, r0, r1), true;
        case DType::Q5_1:
            return matmul_packed_a<DType::Q5_1>(w, x, a, nt, y, ldy, r0, r1), true;
        case DType::Q5_K:
            return matmul_packed_a<DType::Q5_K>(w, x, a, nt, y, ldy, r0, r1), true;
        case DType::INT4_G32:
        case DType::INT4_G64:
        case DType::INT4_G128:
        case DType::INT3_G32:
        case DType::INT3_G64:
        case DType::INT3_G128:  // one tile format for the six
            return matmul_packed_a<DType::INT4_G32>(w, x, a, nt, y, ldy, r0, r1), true;
        case DType::Q8_0:
            return matmul_packed_a<DType::Q8_0>(w, x, a, nt, y, ldy, r0, r1), true;
        case DType::Q4_K:
            return matmul_packed_a<DType::Q4_K>(w, x, a, nt, y, ldy, r0, r1), true;
        case DType::Q6_K:
            return matmul_packed_a<DType::Q6_K>(w, x, a, nt, y, ldy, r0, r1), true;
        default:
            return false;
    }
}

// Tokens per cache block: their activations stay in L2 while the thread's rows stream past.
constexpr int64_t kTokBlock = 64;

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
        case DType::Q5_0:
        case DType::Q5_1:
        case DType::Q8_0:
        case DType::Q4_K:
        case DType::Q5_K:
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

bool matmul_rows(const Weight& w, const float* x, int64_t nt, float* y, int64_t ldy, int64_t r0,
                 int64_t r1) {
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

// ref::gelu_mul's x / (1 + exp(-2u)), the exp vectorised as silu_mul's.
void gelu_mul(float* gate, const float* up, int64_t n) {
    int64_t i = 0;
    const vf one = vset1(1.0f), k2 = vset1(-2.0f * 0.7978845608028654f), c = vset1(0.044715f);
    for (; i + VL <= n; i += VL) {
        const vf x = vld1q_f32(gate + i);
        const vf inner = vfmaq_f32(x, vmulq_f32(c, vmulq_f32(x, x)), x);  // x + 0.044715 x^3
        const vf e = vexp(vmulq_f32(k2, inner));
        vst1q_f32(gate + i, vmulq_f32(vdivq_f32(x, vaddq_f32(one, e)), vld1q_f32(up + i)));
    }
    for (; i < n; ++i) {
        const float x = gate[i];
        const float u2 = 2.0f * 0.7978845608028654f * (x + 0.044715f * x * x * x);
        gate[i] = x / (1.0f + __builtin_expf(-u2)) * up[i];
    }
}

// RoPE, bit for bit the reference (products rounded on their own, never fused): vld2 splits
// adjacent pairs into their first and second elements, and cos_sin into cosines and sines.
void rope(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_sin,
          RopeStyle style) {
    const int half = rope_dim / 2;
    for (int h = 0; h < n_heads; ++h) {
        float* v = x + static_cast<int64_t>(h) * head_dim;
        int i = 0;
        if (style == RopeStyle::Normal) {
            for (; i + VL <= half; i += VL) {
                const float32x4x2_t xv = vld2q_f32(v + 2 * i), cs = vld2q_f32(cos_sin + 2 * i);
                float32x4x2_t o;
                o.val[0] =
                    vsubq_f32(vmulq_f32(xv.val[0], cs.val[0]), vmulq_f32(xv.val[1], cs.val[1]));
                o.val[1] =
                    vaddq_f32(vmulq_f32(xv.val[0], cs.val[1]), vmulq_f32(xv.val[1], cs.val[0]));
                vst2q_f32(v + 2 * i, o);
            }
            for (; i < half; ++i) {
                const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
                const float x0 = v[2 * i], x1 = v[2 * i + 1];
                v[2 * i] = x0 * c - x1 * s;
                v[2 * i + 1] = x0 * s + x1 * c;
            }
        } else {
            for (; i + VL <= half; i += VL) {
                const float32x4x2_t cs = vld2q_f32(cos_sin + 2 * i);
                const vf x0 = vld1q_f32(v + i), x1 = vld1q_f32(v + i + half);
                vst1q_f32(v + i, vsubq_f32(vmulq_f32(x0, cs.val[0]), vmulq_f32(x1, cs.val[1])));
                vst1q_f32(v + i + half,
                          vaddq_f32(vmulq_f32(x0, cs.val[1]), vmulq_f32(x1, cs.val[0])));
            }
            for (; i < half; ++i) {
                const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
                const float x0 = v[i], x1 = v[i + half];
                v[i] = x0 * c - x1 * s;
                v[i + half] = x0 * s + x1 * c;
            }
        }
    }
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

// Two passes, as on x86: the largest value (maxnm ignores a NaN operand), then where it first
// occurs.
int64_t argmax(const float* x, int64_t n) {
    vf mv = vset1(-__builtin_inff());
    int64_t i = 0;
    for (; i + VL <= n; i += VL) mv = vmaxnmq_f32(mv, vld1q_f32(x + i));
    float mx = vmaxvq_f32(mv);
    for (int64_t j = i; j < n; ++j) mx = x[j] > mx ? x[j] : mx;
    const vf vm = vset1(mx);
    for (i = 0; i + VL <= n; i += VL)
        if (vmaxvq_u32(vceqq_f32(vld1q_f32(x + i), vm)))
            for (int64_t j = i;; ++j)
                if (x[j] == mx) return j;
    for (; i < n; ++i)
        if (x[i] == mx) return i;
    return 0;
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

// Optional entries this level has no path for (w8a8's pair, the f16 rows, the double sums) stay
// nullptr, so ops.cpp uses the reference for them.
constexpr LevelKernels make_table() {
    LevelKernels t{};
    t.quantize_act = quantize_act;
    t.matmul_packed = matmul_packed;
    t.matmul_rows = matmul_rows;
    t.rmsnorm = rmsnorm;
    t.silu_mul = silu_mul;
    t.gelu_mul = gelu_mul;
    t.rope = rope;
    t.softmax = softmax;
    t.argmax = argmax;
    t.attend = attend;
    return t;
}

}  // namespace

constexpr LevelKernels kTable = make_table();
}  // namespace ferry::kernels::cpu::neon

namespace ferry::kernels::cpu {
const LevelKernels* neon_kernels() {
    return &neon::kTable;
}
}  // namespace ferry::kernels::cpu
#else
namespace ferry::kernels::cpu {
const LevelKernels* neon_kernels() {
    return nullptr;
}
}  // namespace ferry::kernels::cpu
#endif
