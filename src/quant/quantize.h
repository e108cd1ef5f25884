// Round-to-nearest quantizers, the inverse of dequantize.h. Each GGUF type's is a transcription
// of ggml's `quantize_row_*_ref`, so a file ferry writes holds the same bytes llama.cpp's
// `llama-quantize` (without an importance matrix) would write, and llama.cpp loads it. ferry's
// own types (int8, fp8, int4_g*) are in ferry_types.h and only ferry reads them.
#pragma once

#include <cstdint>
#include <string>
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

// The type a matrix with rows of `row` elements is written as when `target` is asked for: the
// target where its blocks fit, else the best type that does: for the k-quants llama.cpp's
// choice (Q4_K: Q5_0, Q5_K: Q5_1, Q6_K: Q8_0, then F16); int4 and int3 first try their smaller
// groups, then int8; the other block types q8_0, then f16.
DType fallback_for(DType target, int64_t row);

// Whether rounding to `t` maps 0 to exactly 0 (a pruned matrix keeps its pattern): the float
// types and fp8, and the grids with no offset (q8_0, q4_0, q5_0, q6_k, int8, w8a8) or an integer
// zero point (int4, int3); not q4_1, q5_1, q4_k and q5_k, which shift their grid by a minimum.
// fallback_for keeps the property.
bool keeps_zeros(DType t);

// The type a tensor of a model written for `target` gets: norms and biases (1-D) stay f32, as
// the model reads them, and so do a mixture's routers (as llama.cpp keeps them: tiny, and a
// rounding there flips which experts run); w8a8's embedding and output head int8 with float
// activations (W8A16, as SmoothQuant keeps its head in 16 bits); every other matrix
// fallback_for(target, row).
DType type_for_tensor(DType target, const std::string& name, size_t n_dims, int64_t row);

}  // namespace ferry::quant
