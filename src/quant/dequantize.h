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

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);  // round to nearest even
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);  // round to nearest even, NaN preserved

}  // namespace ferry::quant
