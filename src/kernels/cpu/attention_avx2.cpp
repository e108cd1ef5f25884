// The AVX2 + FMA + F16C attention kernel: attention_x86.inc compiled for this target only, so the
// rest of the binary stays portable and paged_attention.cpp picks the level at run time.
#include "kernels/cpu/attention_x86.h"

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define FERRY_AVX512 0

namespace ferry::kernels::cpu::attention_avx2 {
#include "kernels/cpu/attention_x86.inc"
}  // namespace ferry::kernels::cpu::attention_avx2

#undef FERRY_AVX512
#pragma GCC pop_options

namespace ferry::kernels::cpu {
AttendRowsFn avx2_attend_rows() {
    return attention_avx2::attend_rows;
}
}  // namespace ferry::kernels::cpu
#else
namespace ferry::kernels::cpu {
AttendRowsFn avx2_attend_rows() {
    return nullptr;
}
}  // namespace ferry::kernels::cpu
#endif
