// Activations quantized on the fly, so the block types' (and ferry's int4) weights meet
// them in integer dot products (VNNI vpdpbusd, AVX2 maddubs, NEON sdot) instead of being widened to
// floats element by element.
//
// A block of 32 activations becomes integers v on a grid of step d (x ~= d * v). The 16-bit
// grid (Activations::Int16, |v| <= 16256) is stored as two int8 planes, v = 128 * hi + lo with
// hi in [-127, 127] and lo in [-64, 63]: both planes go through the same 8-bit dot-product
// instructions as the weights' nibbles, so 16-bit precision costs a second integer pass rather
// than widening weights to 16 bits. The 8-bit grid (Int8, |v| <= 127) has only hi.
#pragma once

#include <cstdint>

#include "kernels/cpu/ops.h"

namespace ferry::kernels::cpu {

struct ActBlock {
    int8_t hi[32];
    int8_t lo[32];  // zero on the 8-bit grid
    float d;        // step: x ~= d * v; NaN when the block holds a NaN or an infinity
    float sx;       // d * s: what a Q4_1 / Q5_1 (Q4_K / Q5_K) block's minimum multiplies
    int32_t s;      // sum of v: the integer correction of Q4_0's -8, Q5_0's -16, Q8_0's +128
    int32_t s_lo;   // sum of v over the first 16: Q6_K's -32 per 16-element sub-block
};
static_assert(sizeof(ActBlock) == 80);

// Largest |v| on each grid: hi = floor((v + 64) / 128) stays within [-127, 127] and
// lo = v - 128 * hi within [-64, 63], so no plane value is -128 (sign tricks negate them).
constexpr int kActMax16 = 16256;
constexpr int kActMax8 = 127;

// W8A8's activations: each token's row quantized with one scale (SmoothQuant's dynamic
// per-token quantization), so a weight row meets it in a single integer sum. Token t's n values
// are at q + t * stride, its scale at d[t].
struct TokenQ8 {
    const int8_t* q = nullptr;
    const float* d = nullptr;
    int64_t stride = 0;
};

namespace ref {
// n floats (a multiple of 32) into n / 32 blocks on a's grid (a is Int16 or Int8): d = amax /
// kActMax, v = round-to-nearest-even(x * (1 / d)), as the SIMD paths' cvtps rounds.
void quantize_act(const float* x, ActBlock* out, int64_t n, Activations a);
// One token: q[i] = round(x[i] / d) with d = amax / 127 (ties to even, as the SIMD paths'
// cvtps). Returns d; NaN when x holds a NaN (its q are 0), so the product is NaN as the float
// one would be.
float quantize_token_q8(const float* x, int64_t n, int8_t* q);
}  // namespace ref

}  // namespace ferry::kernels::cpu
