// The AVX2 + FMA + F16C kernel level: x86_kernels.inc compiled for this target only, so
// the rest of the binary stays portable and kernels.cpp picks the level from CPUID.
#include "kernels/cpu/simd.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/cpu/packed_weights.h"
#include "quant/block_formats.h"
#include "quant/dequantize.h"
#include "quant/ferry_types.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define FERRY_AVX512 0

namespace ferry::kernels::cpu::avx2 {
#include "kernels/cpu/x86_kernels.inc"
}  // namespace ferry::kernels::cpu::avx2

#undef FERRY_AVX512
#pragma GCC pop_options

namespace ferry::kernels::cpu {
const LevelKernels* avx2_kernels() {
    return &avx2::kTable;
}
}  // namespace ferry::kernels::cpu
#else
namespace ferry::kernels::cpu {
const LevelKernels* avx2_kernels() {
    return nullptr;
}
}  // namespace ferry::kernels::cpu
#endif
