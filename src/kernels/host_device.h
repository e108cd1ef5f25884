// What lets one function compile for both the host and a CUDA device: the qualifier, and float
// operations rounded exactly as written on both sides. nvcc contracts a * b + c into an FMA
// (one rounding instead of two) unless told not to, so code that must give the CPU reference's
// floats bit for bit, or land on the same side of a threshold, spells its products and sums
// with these.
#pragma once

#if defined(__CUDACC__)
#define FERRY_HD __host__ __device__ __forceinline__
#else
#define FERRY_HD inline
#endif
// A loop over a small fixed range unrolled on the device, so arrays it indexes stay in registers
// instead of the stack (a host compiler decides for itself).
#if defined(__CUDA_ARCH__)
#define FERRY_UNROLL _Pragma("unroll")
#else
#define FERRY_UNROLL
#endif

namespace ferry::kernels::exact {

FERRY_HD float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
FERRY_HD float add(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
FERRY_HD float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
FERRY_HD float div(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

}  // namespace ferry::kernels::exact
