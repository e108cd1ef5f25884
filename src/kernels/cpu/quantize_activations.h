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

namespace ref {
// Round-to-nearest with amax mapped to 127; n is a multiple of 32.
void quantize_q8a(const float* x, BlockQ8A* out, int64_t n);
}  // namespace ref

}  // namespace ferry::kernels
