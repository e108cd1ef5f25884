// The AMX level: the AVX-512 level's kernels, with the packed integer matmul's batches of 16
// tokens and more done by AMX-INT8 tile products (Sapphire Rapids and later).
//
// Why it is exact: a block's product is the same integer sum the VNNI kernel forms (hi plane *
// 128 + lo plane, offsets and zero points included), just summed by the tile unit, then the
// same float steps in the same order (ref::dot_act's), so every output equals the AVX-512
// level's bit for bit and a token's logits still do not depend on its batch. Each 32-element
// block needs its own float step (the weights' and the activations' scales are per block), so a
// tile product covers one block: C[16 tokens][16 rows] for the hi plane and another for the lo
// plane, stored and scaled by AVX-512 code while the tile unit works on the next block.
//
// A weight row group (16 rows) is unpacked once per block of up to 64 tokens into the tile
// unit's "VNNI" order (row r of a B tile: 4 consecutive weights of each of the 16 rows), as
// signed bytes with the format's offset already taken off (Q4_0's 8, Q8_0's 128, int4's zero
// point), so the sums need no correction.
#include "kernels/cpu/simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "kernels/cpu/packed_weights.h"
#include "quant/ferry_types.h"

#pragma GCC push_options
#pragma GCC target( \
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi2,avx2,fma,f16c,amx-tile,amx-int8")
// GCC 12 flags its own AVX-512 reduce/convert intrinsics as reading uninitialized values.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ferry::kernels::cpu {
namespace amx {
namespace {

constexpr int kM = 16;             // tokens per tile product
constexpr int64_t kTokBlock = 64;  // tokens whose activations stay in L2 while a group is reused
constexpr int kBBytes = 512;       // one block's B tile: 8 rows of 64 bytes
constexpr int kMinTail =
    12;  // fewest tokens worth a tile (BM_Matmul_narrow: fewer are faster on VNNI)

// The tile registers: two sets of accumulators (hi, lo) so one block's results are scaled while
// the next block's products run, the activations' two planes, and the weights.
#define FERRY_AMX_CHI0 0
#define FERRY_AMX_CLO0 1
#define FERRY_AMX_CHI1 2
#define FERRY_AMX_CLO1 3
#define FERRY_AMX_AHI 4
#define FERRY_AMX_ALO 5
#define FERRY_AMX_B 6

struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// Q6_K's scales are per 16 weights: its blocks are two products of 16 (K = 16), the first half's
// weights in B tile 6 and the second's in tile 7, one plane's halves in A tiles 4 and 5, and the
// four sums (hi / lo x first / second half) in tiles 0-3.
#define FERRY_AMX_Q6_A0 4
#define FERRY_AMX_Q6_A1 5
#define FERRY_AMX_Q6_B0 6
#define FERRY_AMX_Q6_B1 7

// ldtilecfg's asm tells the compiler it reads 8 bytes: the barrier keeps the rest written.
void load(const TileConfig& c) {
    asm volatile("" ::: "memory");
    _tile_loadconfig(&c);
}

void load_tile_config(bool q6k) {
    TileConfig c;
    if (q6k) {
        for (int t = 0; t < 4; ++t) c.rows[t] = kM, c.colsb[t] = 64;
        for (int t : {FERRY_AMX_Q6_A0, FERRY_AMX_Q6_A1}) c.rows[t] = kM, c.colsb[t] = 16;
        for (int t : {FERRY_AMX_Q6_B0, FERRY_AMX_Q6_B1}) c.rows[t] = 4, c.colsb[t] = 64;
    } else {
        for (int t : {FERRY_AMX_CHI0, FERRY_AMX_CLO0, FERRY_AMX_CHI1, FERRY_AMX_CLO1})
            c.rows[t] = kM, c.colsb[t] = 64;  // 16 tokens x 16 rows of int32
        for (int t : {FERRY_AMX_AHI, FERRY_AMX_ALO})
            c.rows[t] = kM, c.colsb[t] = 32;                 // 32 bytes each
        c.rows[FERRY_AMX_B] = 8, c.colsb[FERRY_AMX_B] = 64;  // 32 weights x 16 rows
    }
    load(c);
}

template <DType T>
struct Format {
    static constexpr bool kQ6 = T == DType::Q6_K;
    static constexpr bool kK = T == DType::Q4_K || kQ6;
    static constexpr bool kMin = T == DType::Q4_1 || T == DType::Q4_K;
    static constexpr bool kSparse = packed_int4s(T);  // int4s: int4 with 2 codes of 4 kept
    static constexpr bool kZero = packed_int4(T) || kSparse;
    static constexpr int kBlocks = kK ? 8 : 1;
    static constexpr int kBlockBytes = packed_block_bytes(T);
    static constexpr size_t kTile = packed_tile_bytes(T);
};

// Row i's zero point in each of its 4 bytes.
inline __m512i zero_points(const uint8_t* zp) {
    const __m512i sel =
        _mm512_set_epi32(0x0F0F0F0F, 0x0E0E0E0E, 0x0D0D0D0D, 0x0C0C0C0C, 0x0B0B0B0B, 0x0A0A0A0A,
                         0x09090909, 0x08080808, 0x07070707, 0x06060606, 0x05050505, 0x04040404,
                         0x03030303, 0x02020202, 0x01010101, 0);
    return _mm512_shuffle_epi8(
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zp))), sel);
}

inline __m512 u8(const uint8_t* p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

inline __m512 i8(const uint8_t* p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// Asks for the next row group's packed bytes while this one computes, a share per block, so its
// unpacking does not wait for memory (a 16-token batch of a 65536 x 2048 q4_0 matrix: the
// unpacking stalled on the stream for as long as the tile products took).
struct Prefetch {
    const uint8_t* p = nullptr;
    int64_t per_block = 0;  // bytes asked for per block
    void block(int64_t k) const {
        if (!p) return;
        for (int64_t o = k * per_block; o < (k + 1) * per_block; o += 64)
            _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T0);
    }
};

// One group's tiles, unpacked: per 32-element block its B tile (K order: B row r holds weights
// 4r .. 4r + 3 of every row) and its 16 rows' float factors dw (and mw), formed as the VNNI
// kernel forms them.
template <DType T>
void unpack_group(const uint8_t* tiles, int64_t n_tiles, int8_t* b, float* dw, float* mw) {
    using F = Format<T>;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t ti = 0; ti < n_tiles; ++ti) {
        const uint8_t* tp = tiles + ti * F::kTile;
        __m512 dsup = _mm512_setzero_ps(), msup = _mm512_setzero_ps();
        if constexpr (F::kQ6) {
            dsup = _mm512_cvtph_ps(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tp + PackedQ6K::d)));
        } else if constexpr (F::kK) {
            dsup = _mm512_cvtph_ps(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tp + PackedQ4K::d)));
            msup = _mm512_cvtph_ps(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tp + PackedQ4K::dmin)));
        }
        for (int blk = 0; blk < F::kBlocks; ++blk) {
            const int64_t k = ti * F::kBlocks + blk;
            const uint8_t* bp = tp + blk * F::kBlockBytes;
            int8_t* dst = b + k * kBBytes;
            if constexpr (T == DType::Q8_0) {
                // Packed bytes are w + 128; chunk c holds weights 4c .. 4c + 3.
                for (int c = 0; c < 8; ++c)
                    _mm512_store_si512(dst + 64 * c,
                                       _mm512_xor_si512(_mm512_loadu_si512(bp + 64 * c),
                                                        _mm512_set1_epi8(static_cast<char>(0x80))));
            } else {
                __m512i off = _mm512_setzero_si512();
                if constexpr (T == DType::Q4_0) off = _mm512_set1_epi8(8);
                if constexpr (F::kQ6) off = _mm512_set1_epi8(32);
                if constexpr (F::kZero)
                    off = zero_points(tp + (F::kSparse ? PackedInt4S::z : kPackedInt4Zero));
                // Weight vector v (packed_weights.h): chunk v / 2's low (v even) or high nibbles,
                // meeting activations (v odd ? 16 : 0) + 4 (v / 2): B row v / 2 or 4 + v / 2.
                __m512i w[8];
                if constexpr (F::kSparse) {
                    // Chunk c's 32 bytes hold the kept codes of vectors 2c (low nibbles) and
                    // 2c + 1 (high); each vector's 64-bit mask puts them back, z elsewhere.
                    const __m256i m4h = _mm256_set1_epi8(0x0F);
                    for (int c = 0; c < 4; ++c) {
                        const __m256i q =
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tp + 32 * c));
                        uint64_t k[2];
                        std::memcpy(k, tp + PackedInt4S::masks + 16 * c, 16);
                        w[2 * c] = _mm512_mask_expand_epi8(
                            off, _cvtu64_mask64(k[0]),
                            _mm512_castsi256_si512(_mm256_and_si256(q, m4h)));
                        w[2 * c + 1] = _mm512_mask_expand_epi8(
                            off, _cvtu64_mask64(k[1]),
                            _mm512_castsi256_si512(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4h)));
                    }
                } else {
                    for (int c = 0; c < 4; ++c) {
                        const __m512i v = _mm512_loadu_si512(bp + 64 * c);
                        w[2 * c] = _mm512_and_si512(v, m4);
                        w[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                    }
                }
                if constexpr (F::kQ6) {
                    // High 2 bits: chunk g's bits 2t, 2t + 1 belong to vector 4g + t.
                    const __m512i hm = _mm512_set1_epi8(0x30);
                    for (int g = 0; g < 2; ++g) {
                        const __m512i h = _mm512_loadu_si512(bp + kPackedQ6High + 64 * g);
                        w[4 * g + 0] = _mm512_or_si512(
                            w[4 * g + 0], _mm512_and_si512(_mm512_slli_epi16(h, 4), hm));
                        w[4 * g + 1] = _mm512_or_si512(
                            w[4 * g + 1], _mm512_and_si512(_mm512_slli_epi16(h, 2), hm));
                        w[4 * g + 2] = _mm512_or_si512(w[4 * g + 2], _mm512_and_si512(h, hm));
                        w[4 * g + 3] = _mm512_or_si512(
                            w[4 * g + 3], _mm512_and_si512(_mm512_srli_epi16(h, 2), hm));
                    }
                }
                for (int v = 0; v < 8; ++v)
                    _mm512_store_si512(dst + 64 * (v % 2 ? 4 + v / 2 : v / 2),
                                       _mm512_sub_epi8(w[v], off));
            }
            __m512 d, m = _mm512_setzero_ps();
            if constexpr (F::kQ6) {  // the two halves' factors: d in dw, the second's in mw
                d = _mm512_mul_ps(i8(tp + PackedQ6K::scales + 32 * blk), dsup);
                m = _mm512_mul_ps(i8(tp + PackedQ6K::scales + 32 * blk + 16), dsup);
            } else if constexpr (F::kK) {
                d = _mm512_mul_ps(u8(tp + PackedQ4K::sc + 16 * blk), dsup);
                m = _mm512_mul_ps(u8(tp + PackedQ4K::m + 16 * blk), msup);
            } else {
                const int so = packed_scales_offset(T);
                d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tp + so)));
                if constexpr (F::kMin)
                    m = _mm512_cvtph_ps(
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tp + so + 32)));
            }
            _mm512_store_ps(dw + 16 * k, d);
            if constexpr (F::kMin || F::kQ6) _mm512_store_ps(mw + 16 * k, m);
        }
    }
    // tileloadd's asm does not tell the compiler it reads memory: finish the stores first.
    asm volatile("" ::: "memory");
}

// Block K's products for 16 tokens into the accumulators CHI / CLO (tile registers are
// immediates, hence macros), and their store to chi / clo.
#define FERRY_AMX_ISSUE(K, CHI, CLO)                       \
    do {                                                   \
        const ActBlock* xb = x + t0 * nbx + (K);           \
        _tile_loadd(FERRY_AMX_B, b + (K)*kBBytes, 64);     \
        _tile_loadd(FERRY_AMX_AHI, xb->hi, stride);        \
        _tile_zero(CHI);                                   \
        _tile_dpbssd(CHI, FERRY_AMX_AHI, FERRY_AMX_B);     \
        if constexpr (k16) {                               \
            _tile_loadd(FERRY_AMX_ALO, xb->lo, stride);    \
            _tile_zero(CLO);                               \
            _tile_dpbssd(CLO, FERRY_AMX_ALO, FERRY_AMX_B); \
        }                                                  \
    } while (0)
// tilestored that tells the compiler which memory it writes (the intrinsic clobbers all memory,
// which made GCC keep the accumulators on the stack and reload them every block).
#define FERRY_AMX_STORE_TILE(T, P)                   \
    asm volatile("tilestored %%tmm" #T ", (%1,%2,1)" \
                 : "=m"(*(int32_t(*)[kM * 16])(P))   \
                 : "r"(P), "r"(64L))
#define FERRY_AMX_STORE(CHI, CLO, S)                          \
    do {                                                      \
        FERRY_AMX_STORE_TILE(CHI, chi[S]);                    \
        if constexpr (k16) FERRY_AMX_STORE_TILE(CLO, clo[S]); \
    } while (0)

// 16 tokens from t0 against one unpacked group: y rows [0, n_rows) of each token.
template <DType T, bool k16>
void tokens16(const int8_t* b, const float* dw, const float* mw, int64_t nblocks, const ActBlock* x,
              int64_t nbx, int64_t t0, float* y, int64_t ldy, int n_rows, int n_tokens,
              Prefetch pf) {
    using F = Format<T>;
    alignas(64) int32_t chi[2][kM * 16], clo[2][kM * 16];
    __m512 facc[kM], macc[kM];
#pragma GCC unroll 16
    for (int m = 0; m < kM; ++m) facc[m] = macc[m] = _mm512_setzero_ps();
    const long stride = static_cast<long>(nbx * sizeof(ActBlock));
    // Block K's sums (in chi / clo[SET]) to the accumulators, as the VNNI kernel's float steps.
    // Unrolled in place, so the accumulators stay in registers.
#define FERRY_AMX_SCALE(K, SET)                                                                  \
    do {                                                                                         \
        const __m512 d = _mm512_load_ps(dw + 16 * (K));                                          \
        __m512 mk = _mm512_setzero_ps();                                                         \
        if constexpr (F::kMin) mk = _mm512_load_ps(mw + 16 * (K));                               \
        _Pragma("GCC unroll 16") for (int m = 0; m < kM; ++m) {                                  \
            const ActBlock& a = x[(t0 + m) * nbx + (K)];                                         \
            __m512i p = _mm512_load_si512(chi[SET] + 16 * m);                                    \
            if constexpr (k16)                                                                   \
                p = _mm512_add_epi32(_mm512_slli_epi32(p, 7),                                    \
                                     _mm512_load_si512(clo[SET] + 16 * m));                      \
            facc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),                                     \
                                      _mm512_mul_ps(d, _mm512_set1_ps(a.d)), facc[m]);           \
            if constexpr (F::kMin) macc[m] = _mm512_fmadd_ps(mk, _mm512_set1_ps(a.sx), macc[m]); \
        }                                                                                        \
    } while (0)
    // Block k is in the first set when k is even; block k + 1's products start before block k
    // is scaled.
    FERRY_AMX_ISSUE(0, FERRY_AMX_CHI0, FERRY_AMX_CLO0);
    for (int64_t k = 0; k < nblocks; k += 2) {
        const bool next = k + 1 < nblocks;
        if (next) FERRY_AMX_ISSUE(k + 1, FERRY_AMX_CHI1, FERRY_AMX_CLO1);
        FERRY_AMX_STORE(FERRY_AMX_CHI0, FERRY_AMX_CLO0, 0);
        FERRY_AMX_SCALE(k, 0);
        pf.block(k);
        if (!next) break;
        if (k + 2 < nblocks) FERRY_AMX_ISSUE(k + 2, FERRY_AMX_CHI0, FERRY_AMX_CLO0);
        FERRY_AMX_STORE(FERRY_AMX_CHI1, FERRY_AMX_CLO1, 1);
        FERRY_AMX_SCALE(k + 1, 1);
        pf.block(k + 1);
    }
    const __mmask16 keep = static_cast<__mmask16>((1u << n_rows) - 1);
#pragma GCC unroll 16
    for (int m = 0; m < kM; ++m) {
        __m512 v = facc[m];
        if constexpr (T == DType::Q4_1) v = _mm512_add_ps(v, macc[m]);
        if constexpr (T == DType::Q4_K) v = _mm512_sub_ps(v, macc[m]);
        if (m < n_tokens) _mm512_mask_storeu_ps(y + (t0 + m) * ldy, keep, v);
    }
}

// Q6_K: per block, each plane's two halves against their own B tiles, the four sums stored, then
// the VNNI kernel's two float steps (first half, second half).
template <bool k16>
void tokens16_q6k(const int8_t* b, const float* dw, const float* mw, int64_t nblocks,
                  const ActBlock* x, int64_t nbx, int64_t t0, float* y, int64_t ldy, int n_rows,
                  int n_tokens, Prefetch pf) {
    alignas(64) int32_t che[kM * 16], cho[kM * 16], cle[kM * 16], clo[kM * 16];
    __m512 facc[kM];
#pragma GCC unroll 16
    for (int m = 0; m < kM; ++m) facc[m] = _mm512_setzero_ps();
    const long stride = static_cast<long>(nbx * sizeof(ActBlock));
    for (int64_t k = 0; k < nblocks; ++k) {
        pf.block(k);
        const ActBlock* xb = x + t0 * nbx + k;
        _tile_loadd(FERRY_AMX_Q6_B0, b + k * kBBytes, 64);
        _tile_loadd(FERRY_AMX_Q6_B1, b + k * kBBytes + kBBytes / 2, 64);
        _tile_loadd(FERRY_AMX_Q6_A0, xb->hi, stride);
        _tile_loadd(FERRY_AMX_Q6_A1, xb->hi + 16, stride);
        _tile_zero(0);
        _tile_zero(1);
        _tile_dpbssd(0, FERRY_AMX_Q6_A0, FERRY_AMX_Q6_B0);
        _tile_dpbssd(1, FERRY_AMX_Q6_A1, FERRY_AMX_Q6_B1);
        if constexpr (k16) {
            _tile_loadd(FERRY_AMX_Q6_A0, xb->lo, stride);
            _tile_loadd(FERRY_AMX_Q6_A1, xb->lo + 16, stride);
            _tile_zero(2);
            _tile_zero(3);
            _tile_dpbssd(2, FERRY_AMX_Q6_A0, FERRY_AMX_Q6_B0);
            _tile_dpbssd(3, FERRY_AMX_Q6_A1, FERRY_AMX_Q6_B1);
        }
        FERRY_AMX_STORE_TILE(0, che);
        FERRY_AMX_STORE_TILE(1, cho);
        if constexpr (k16) {
            FERRY_AMX_STORE_TILE(2, cle);
            FERRY_AMX_STORE_TILE(3, clo);
        }
        const __m512 de = _mm512_load_ps(dw + 16 * k), dodd = _mm512_load_ps(mw + 16 * k);
#pragma GCC unroll 16
        for (int m = 0; m < kM; ++m) {
            const __m512 dx = _mm512_set1_ps(xb[m * nbx].d);
            __m512i pe = _mm512_load_si512(che + 16 * m), po = _mm512_load_si512(cho + 16 * m);
            if constexpr (k16) {
                pe = _mm512_add_epi32(_mm512_slli_epi32(pe, 7), _mm512_load_si512(cle + 16 * m));
                po = _mm512_add_epi32(_mm512_slli_epi32(po, 7), _mm512_load_si512(clo + 16 * m));
            }
            facc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pe), _mm512_mul_ps(de, dx), facc[m]);
            facc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(po), _mm512_mul_ps(dodd, dx), facc[m]);
        }
    }
    const __mmask16 keep = static_cast<__mmask16>((1u << n_rows) - 1);
#pragma GCC unroll 16
    for (int m = 0; m < kM; ++m)
        if (m < n_tokens) _mm512_mask_storeu_ps(y + (t0 + m) * ldy, keep, facc[m]);
}

// Tokens [0, nt): whole tiles of 16, then the `tail` after them (0, or kMinTail-15 tokens) as one
// more tile from a copy padded with zero blocks, so its tile loads stay inside memory of ours.
template <DType T, bool k16>
void matmul_t(const Weight& w, const ActBlock* x, int64_t nt, int tail, float* y, int64_t ldy,
              int64_t r0, int64_t r1) {
    using F = Format<T>;
    const int64_t n_tiles = w.cols / packed_tile_cols(T), nbx = w.cols / 32;
    const size_t group_bytes = static_cast<size_t>(n_tiles) * F::kTile;
    // Per thread: the group's B tiles, its float factors (one row of 16 per block each), then
    // the padded tail.
    const size_t act_floats = sizeof(ActBlock) / sizeof(float);
    float* scratch = scratch_floats(static_cast<size_t>(nbx) * (kBBytes / 4 + 32) +
                                    (tail ? kM * nbx * act_floats : 0));
    int8_t* b = reinterpret_cast<int8_t*>(scratch);
    float* dw = scratch + nbx * (kBBytes / 4);
    float* mw = dw + nbx * 16;
    auto* padded = reinterpret_cast<ActBlock*>(mw + nbx * 16);
    if (tail) {
        std::memcpy(padded, x + nt * nbx, sizeof(ActBlock) * tail * nbx);
        std::memset(static_cast<void*>(padded + tail * nbx), 0,
                    sizeof(ActBlock) * (kM - tail) * nbx);
    }
    load_tile_config(F::kQ6);
    const int64_t end = nt + (tail ? kM : 0);
    for (int64_t tb = 0; tb < end; tb += kTokBlock) {
        const int64_t te = tb + kTokBlock < end ? tb + kTokBlock : end;
        for (int64_t r = r0; r < r1; r += kPackRows) {
            unpack_group<T>(w.packed + static_cast<size_t>(r / kPackRows) * group_bytes, n_tiles, b,
                            dw, mw);
            const int n_rows = static_cast<int>(r1 - r < kPackRows ? r1 - r : kPackRows);
            for (int64_t t = tb; t < te; t += kM) {
                // The tail reads its padded copy as tokens 0-15 and writes from token nt on.
                const bool last = t >= nt;
                const ActBlock* xs = last ? padded : x;
                const int64_t t0 = last ? 0 : t;
                float* ys = y + r + (last ? nt * ldy : 0);
                const int n_tok = last ? tail : kM;
                // The first tile of a group asks for the next group's bytes.
                Prefetch pf;
                if (t == tb && r + kPackRows < r1)
                    pf = {w.packed + static_cast<size_t>(r / kPackRows + 1) * group_bytes,
                          static_cast<int64_t>((group_bytes / nbx + 63) / 64 * 64)};
                if constexpr (F::kQ6)
                    tokens16_q6k<k16>(b, dw, mw, nbx, xs, nbx, t0, ys, ldy, n_rows, n_tok, pf);
                else
                    tokens16<T, k16>(b, dw, mw, nbx, xs, nbx, t0, ys, ldy, n_rows, n_tok, pf);
            }
        }
    }
    _tile_release();
}

template <DType T>
void matmul_a(const Weight& w, const ActBlock* x, Activations a, int64_t nt, int tail, float* y,
              int64_t ldy, int64_t r0, int64_t r1) {
    if (a == Activations::Int16)
        matmul_t<T, true>(w, x, nt, tail, y, ldy, r0, r1);
    else
        matmul_t<T, false>(w, x, nt, tail, y, ldy, r0, r1);
}

bool matmul_packed(const Weight& w, const ActBlock* x, Activations a, int64_t nt, float* y,
                   int64_t ldy, int64_t r0, int64_t r1) {
    const LevelKernels* vnni = avx512_kernels();
    // Whole tiles of 16 tokens go to the tile unit, and a rest of kMinTail or more as one more
    // tile (a tile costs the same whatever its rows: below that the VNNI kernel is faster); a
    // smaller rest, and the types the tile unit has no path for, to the VNNI kernel, whose bits
    // are the same.
    const int64_t full = nt / kM * kM;
    const int rest = static_cast<int>(nt - full);
    const int tail = rest >= kMinTail ? rest : 0;
    const bool done = full + tail > 0;
    switch (w.type) {
        case DType::Q4_0:
            if (done) matmul_a<DType::Q4_0>(w, x, a, full, tail, y, ldy, r0, r1);
            break;
        case DType::Q4_1:
            if (done) matmul_a<DType::Q4_1>(w, x, a, full, tail, y, ldy, r0, r1);
            break;
        case DType::Q8_0:
            if (done) matmul_a<DType::Q8_0>(w, x, a, full, tail, y, ldy, r0, r1);
            break;
        case DType::Q4_K:
            if (done) matmul_a<DType::Q4_K>(w, x, a, full, tail, y, ldy, r0, r1);
            break;
        case DType::Q6_K:
            if (done) matmul_a<DType::Q6_K>(w, x, a, full, tail, y, ldy, r0, r1);
            break;
        case DType::INT4S_G32:
        case DType::INT4S_G64:
        case DType::INT4S_G128:  // one tile format for the three
            if (done) matmul_a<DType::INT4S_G32>(w, x, a, full, tail, y, ldy, r0, r1);
            break;
        case DType::INT4_G32:
        case DType::INT4_G64:
        case DType::INT4_G128:
        case DType::INT3_G32:
        case DType::INT3_G64:
        case DType::INT3_G128:  // one tile format for the six
            if (done) matmul_a<DType::INT4_G32>(w, x, a, full, tail, y, ldy, r0, r1);
            break;
        default:
            return vnni->matmul_packed(w, x, a, nt, y, ldy, r0, r1);
    }
    if (full + tail == nt) return true;
    return vnni->matmul_packed(w, x + full * (w.cols / 32), a, rest, y + full * ldy, ldy, r0, r1);
}

// ---- w8a8: int8 rows x per-token int8 activations, one exact integer sum per row and token ------
// No per-block scales here, so the tile unit keeps its sums across the whole row and the float
// step comes once at the end: the weights are the A side as they lie in memory (16 rows x 64
// bytes per tile), the activations the B side, transposed once per token block into the tile
// unit's layout (B row j: bytes 4j .. 4j + 3 of each of 16 tokens).

constexpr int64_t kW8TokBlock = 128;  // tokens transposed at a time (K bytes each, in L2)
constexpr int kChunk = 64;            // bytes of a row per tile product

// A 16 x 16 matrix of 32-bit elements, transposed in registers.
inline void transpose16(__m512i* r) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    // u[4i + k], 128-bit lane L: rows 4i .. 4i + 3 at column 4L + k.
    for (int k = 0; k < 4; ++k) {
        const __m512i p = _mm512_shuffle_i32x4(u[k], u[4 + k], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i q = _mm512_shuffle_i32x4(u[k], u[4 + k], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512i v = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i w = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], _MM_SHUFFLE(3, 2, 3, 2));
        r[k] = _mm512_shuffle_i32x4(p, v, _MM_SHUFFLE(2, 0, 2, 0));
        r[4 + k] = _mm512_shuffle_i32x4(p, v, _MM_SHUFFLE(3, 1, 3, 1));
        r[8 + k] = _mm512_shuffle_i32x4(q, w, _MM_SHUFFLE(2, 0, 2, 0));
        r[12 + k] = _mm512_shuffle_i32x4(q, w, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

// Tokens [t0, t0 + 16 * subs) into B tiles: sub-block s's chunk c at bt + (s * chunks + c) * 1024.
void transpose_tokens(const TokenQ8& x, int64_t t0, int64_t subs, int64_t chunks, int8_t* bt) {
    for (int64_t s = 0; s < subs; ++s)
        for (int64_t c = 0; c < chunks; ++c) {
            __m512i r[16];
            for (int t = 0; t < 16; ++t)
                r[t] = _mm512_loadu_si512(x.q + (t0 + 16 * s + t) * x.stride + kChunk * c);
            transpose16(r);
            int8_t* dst = bt + (s * chunks + c) * 1024;
            for (int j = 0; j < 16; ++j) _mm512_store_si512(dst + 64 * j, r[j]);
        }
    asm volatile("" ::: "memory");  // the tile loads read what was just stored
}

// RA x 16 rows from `row` (the first row's bytes, header included) against TB x 16 tokens whose B
// tiles start at bt (the next 16 tokens' a sub-block further): their exact sums, then the VNNI
// kernel's float step float(s) * (sw * dx).
template <int RA, int TB>
void w8a8_tiles(const uint8_t* row, size_t row_stride, const int8_t* bt, int64_t chunks,
                const float* dx, float* y, int64_t ldy) {
    const long rs = static_cast<long>(row_stride);
    const uint8_t* q0 = row + quant::kW8A8HeaderBytes;
    const uint8_t* q1 = q0 + 16 * row_stride;
    const int8_t* b1 = bt + chunks * 1024;
    _tile_zero(0);
    if constexpr (TB == 2) _tile_zero(1);
    if constexpr (RA == 2) _tile_zero(2);
    if constexpr (RA == 2 && TB == 2) _tile_zero(3);
    for (int64_t c = 0; c < chunks; ++c) {
        _tile_loadd(4, q0 + kChunk * c, rs);
        _tile_loadd(6, bt + 1024 * c, 64);
        _tile_dpbssd(0, 4, 6);
        if constexpr (TB == 2) {
            _tile_loadd(7, b1 + 1024 * c, 64);
            _tile_dpbssd(1, 4, 7);
        }
        if constexpr (RA == 2) {
            _tile_loadd(5, q1 + kChunk * c, rs);
            _tile_dpbssd(2, 5, 6);
            if constexpr (TB == 2) _tile_dpbssd(3, 5, 7);
        }
    }
    alignas(64) int32_t c[4][256];
    FERRY_AMX_STORE_TILE(0, c[0]);
    if constexpr (TB == 2) FERRY_AMX_STORE_TILE(1, c[1]);
    if constexpr (RA == 2) FERRY_AMX_STORE_TILE(2, c[2]);
    if constexpr (RA == 2 && TB == 2) FERRY_AMX_STORE_TILE(3, c[3]);
    for (int ra = 0; ra < RA; ++ra)
        for (int tb = 0; tb < TB; ++tb) {
            // C[row][token]: one vector per row over 16 tokens, then turned to token-major.
            const __m512 dxv = _mm512_loadu_ps(dx + 16 * tb);
            __m512i v[16];
            for (int i = 0; i < 16; ++i) {
                float sw;
                std::memcpy(&sw, row + (16 * ra + i) * row_stride, sizeof(sw));
                const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(c[2 * ra + tb] + 16 * i));
                v[i] =
                    _mm512_castps_si512(_mm512_mul_ps(s, _mm512_mul_ps(_mm512_set1_ps(sw), dxv)));
            }
            transpose16(v);
            for (int t = 0; t < 16; ++t)
                _mm512_storeu_ps(y + (16 * tb + t) * ldy + 16 * ra, _mm512_castsi512_ps(v[t]));
        }
}

void load_w8a8_config() {
    TileConfig c;
    for (int t = 0; t < 8; ++t) c.rows[t] = 16, c.colsb[t] = 64;
    load(c);
}

void matmul_w8a8(const Weight& w, const TokenQ8& x, int64_t nt, float* y, int64_t ldy, int64_t r0,
                 int64_t r1) {
    const LevelKernels* vnni = avx512_kernels();
    const int64_t n = w.cols, chunks = n / kChunk;
    // Whole 16 x 16 tiles here; rows and tokens left over (and rows that are not whole 64-byte
    // chunks) to the VNNI kernel, whose bits are the same.
    const int64_t rows16 = n % kChunk ? 0 : (r1 - r0) / 16 * 16,
                  nt16 = n % kChunk ? 0 : nt / 16 * 16;
    if (rows16 > 0 && nt16 > 0) {
        int8_t* bt = reinterpret_cast<int8_t*>(
            scratch_floats(static_cast<size_t>(kW8TokBlock / 16 * chunks * 1024 / 4)));
        load_w8a8_config();
        for (int64_t tb = 0; tb < nt16; tb += kW8TokBlock) {
            const int64_t te = tb + kW8TokBlock < nt16 ? tb + kW8TokBlock : nt16;
            transpose_tokens(x, tb, (te - tb) / 16, chunks, bt);
            for (int64_t r = r0; r < r0 + rows16;) {
                const bool two_rows = r + 32 <= r0 + rows16;
                for (int64_t t = tb; t < te;) {
                    const bool two_toks = t + 32 <= te;
                    const int8_t* b = bt + (t - tb) / 16 * chunks * 1024;
                    float* yy = y + t * ldy + r;
                    if (two_rows && two_toks)
                        w8a8_tiles<2, 2>(w.row(r), w.row_stride, b, chunks, x.d + t, yy, ldy);
                    else if (two_rows)
                        w8a8_tiles<2, 1>(w.row(r), w.row_stride, b, chunks, x.d + t, yy, ldy);
                    else if (two_toks)
                        w8a8_tiles<1, 2>(w.row(r), w.row_stride, b, chunks, x.d + t, yy, ldy);
                    else
                        w8a8_tiles<1, 1>(w.row(r), w.row_stride, b, chunks, x.d + t, yy, ldy);
                    t += two_toks ? 32 : 16;
                }
                r += two_rows ? 32 : 16;
            }
        }
        _tile_release();
    }
    if (rows16 < r1 - r0) vnni->matmul_w8a8(w, x, nt, y, ldy, r0 + rows16, r1);
    if (rows16 > 0 && nt16 < nt) {
        const TokenQ8 rest{x.q + nt16 * x.stride, x.d + nt16, x.stride};
        vnni->matmul_w8a8(w, rest, nt - nt16, y + nt16 * ldy, ldy, r0, r0 + rows16);
    }
}

LevelKernels make_table() {
    LevelKernels t = *avx512_kernels();
    t.matmul_packed = matmul_packed;
    t.matmul_w8a8 = matmul_w8a8;
    return t;
}

}  // namespace
}  // namespace amx

bool amx_usable() {
    // The AVX-512 level's features are the caller's to have checked (dispatch's detect).
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vbmi2")) return false;
    // CPUID leaf 7: EDX bit 24 AMX-TILE, bit 25 AMX-INT8.
    unsigned a, b, c, d;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    if (!(d >> 24 & 1) || !(d >> 25 & 1)) return false;
    // Linux hands out the tile state only on request (ARCH_REQ_XCOMP_PERM for XTILEDATA, 18),
    // once for the whole process; a kernel or hypervisor that refuses leaves the AVX-512 level.
    constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

const LevelKernels* amx_kernels() {
    static const LevelKernels table = amx::make_table();
    return &table;
}

}  // namespace ferry::kernels::cpu

#pragma GCC pop_options
#else
namespace ferry::kernels::cpu {
bool amx_usable() {
    return false;
}
const LevelKernels* amx_kernels() {
    return nullptr;
}
}  // namespace ferry::kernels::cpu
#endif
