// Round-to-nearest quantizers, the inverse of dequantize.h. Each GGUF type's is a transcription
// of ggml's `quantize_row_*_ref`, so a file ferry writes holds the same bytes llama.cpp's
// `llama-quantize` (without an importance matrix) would write, and llama.cpp loads it. ferry's
// own types (int8, fp8, int4_g*) are in ferry_types.h and only ferry reads them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace ferry::quant {

// True for the types quantize_row can produce.
bool can_quantize(DType type);

// Writes n floats (a multiple of the type's block size) as row_bytes(type, n) bytes at dst.
// For a type with a row header, n is one whole row.
Status quantize_row(DType type, const float* src, void* dst, int64_t n);

// Convenience: quantize_row into a fresh buffer.
Expected<std::vector<uint8_t>> quantize(DType type, const float* src, int64_t n);

}  // namespace ferry::quant
