// Scalar reference dequantizers, one per block format. These are the ground truth that
// every SIMD kernel is tested against, so they favour clarity over speed.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace ferry::quant {

// Converts n elements (a multiple of the type's block size) starting at src into floats.
// Returns an error for a type ferry cannot dequantize. For a type with a row header (int8,
// fp8) src must be the start of a row and n its whole length.
Status dequantize_row(DType type, const void* src, float* dst, int64_t n);

// A k-quant super-block's integers in element order, as its dequantization multiplies them
// (the packed layout of kernels/cpu/packed_weights.h and the integer reference are built on them):
//   Q4_K: element i = d * sc[i / 32] * q[i] - dmin * m[i / 32], q in [0, 15], sc and m 6-bit;
//   Q5_K: as Q4_K with q in [0, 31];
//   Q6_K: element i = d * scales[i / 16] * (q[i] - 32), q in [0, 63].
struct BlockQ4_K;
struct BlockQ5_K;
struct BlockQ6_K;
void q4_k_ints(const BlockQ4_K& b, uint8_t q[256], uint8_t sc[8], uint8_t m[8]);
void q5_k_ints(const BlockQ5_K& b, uint8_t q[256], uint8_t sc[8], uint8_t m[8]);
// Just Q4_K's 8 scales and 8 minimums, from the 12 bytes that pack them.
void q4_k_scale_mins(const uint8_t packed[12], uint8_t sc[8], uint8_t m[8]);
void q6_k_ints(const BlockQ6_K& b, uint8_t q[256]);
// A Q5_0 / Q5_1 block's 32 five-bit levels in element order (element i = d * (q[i] - 16), or
// d * q[i] + m): `block` points at the block, whose qh and qs sit after its fp16 scale(s).
void q5_ints(DType type, const void* block, uint8_t q[32]);

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);  // round to nearest even
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);  // round to nearest even, NaN preserved

}  // namespace ferry::quant
