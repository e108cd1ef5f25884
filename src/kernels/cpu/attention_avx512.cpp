// The AVX-512 (F/BW/VL/DQ) attention kernel: attention_x86.inc compiled for this target only, so
// the rest of the binary stays portable and paged_attention.cpp picks the level at run time.
#include "kernels/cpu/attention_x86.h"

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
// GCC 12 flags its own AVX-512 reduce intrinsics as reading uninitialized values.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define FERRY_AVX512 1

namespace ferry::kernels::cpu::attention_avx512 {
#include "kernels/cpu/attention_x86.inc"
}  // namespace ferry::kernels::cpu::attention_avx512

#undef FERRY_AVX512
#pragma GCC pop_options

namespace ferry::kernels::cpu {
AttendRowsFn avx512_attend_rows() {
    return attention_avx512::attend_rows;
}
}  // namespace ferry::kernels::cpu
#else
namespace ferry::kernels::cpu {
AttendRowsFn avx512_attend_rows() {
    return nullptr;
}
}  // namespace ferry::kernels::cpu
#endif
