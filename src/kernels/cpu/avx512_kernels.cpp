// The AVX-512 (F/BW/VL/DQ) + VNNI kernel level: x86_kernels.inc compiled for this target only, so
// the rest of the binary stays portable and kernels.cpp picks the level from CPUID.
#include "kernels/cpu/simd.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <limits>

#include "kernels/cpu/packed_weights.h"
#include "quant/block_formats.h"
#include "quant/dequantize.h"
#include "quant/ferry_types.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
// GCC 12 flags its own AVX-512 reduce/convert intrinsics as reading uninitialized values.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define FERRY_AVX512 1

namespace ferry::kernels::cpu::avx512 {
#include "kernels/cpu/x86_kernels.inc"
}  // namespace ferry::kernels::cpu::avx512

#undef FERRY_AVX512
#pragma GCC pop_options

namespace ferry::kernels::cpu {
const LevelKernels* avx512_kernels() {
    return &avx512::kTable;
}
}  // namespace ferry::kernels::cpu
#else
namespace ferry::kernels::cpu {
const LevelKernels* avx512_kernels() {
    return nullptr;
}
}  // namespace ferry::kernels::cpu
#endif
