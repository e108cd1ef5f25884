// Activations quantized on the fly to 8 bits, so Q4/Q8 weights meet them in integer dot
// products (VNNI vpdpbusd or AVX2 maddubs) instead of being widened to floats element by
// element. One format serves every integer path: blocks of 32 like Q8_1, but with float scale
// and sum since they never leave the process and fp16 would only lose precision.
#pragma once

#include <cstdint>

namespace ferry::kernels {

struct BlockQ8A {
    float d;  // scale: x ~= d * qs
    float s;  // d * sum(qs): what a weight block's offset (Q4_1 min, Q4_0 -8) multiplies
    int8_t qs[32];
};
static_assert(sizeof(BlockQ8A) == 40);

// W8A8's activations: each token's row quantized with one scale (SmoothQuant's dynamic
// per-token quantization), so a weight row meets it in a single integer sum. Token t's n values
// are at q + t * stride, its scale at d[t].
struct TokenQ8 {
    const int8_t* q = nullptr;
    const float* d = nullptr;
    int64_t stride = 0;
};

namespace ref {
// Round-to-nearest with amax mapped to 127; n is a multiple of 32.
void quantize_q8a(const float* x, BlockQ8A* out, int64_t n);
// One token: q[i] = round(x[i] / d) with d = amax / 127 (ties to even, as the SIMD paths'
// cvtps). Returns d; NaN when x holds a NaN (its q are 0), so the product is NaN as the float
// one would be.
float quantize_token_q8(const float* x, int64_t n, int8_t* q);
}  // namespace ref

}  // namespace ferry::kernels
