// The weight types `ferry quantize` and `ferry synth` write, spelled the same way: parsing a
// --type, the type a row that does not split into the target's blocks falls back to, and the
// file-type metadata llama.cpp's tools read.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "gguf/gguf_writer.h"

namespace ferry::cli {

// A --type name (q8_0, q4_k, f16, int8, ...); `int4` names ferry's int4 family, whose member
// group_size picks (32, 64 or 128).
Expected<DType> parse_weight_type(const std::string& name, int group_size = 128);

// The type a matrix with rows of `row` elements is written as when `target` is asked for: the
// target where its blocks fit, else the best type that does, as llama.cpp does for odd-width
// models (int4 first tries its smaller groups, then int8; the block types q8_0, then f16).
DType fallback_for(DType target, int64_t row);

// The type a tensor of a model written for `target` gets: norms and biases (1-D) stay f32, as
// the model reads them; w8a8's embedding and output head int8 with float activations (W8A16,
// as SmoothQuant keeps its head in 16 bits); every other matrix fallback_for(target, row).
DType type_for_tensor(DType target, const std::string& name, size_t n_dims, int64_t row);

// general.file_type (llama.cpp's llama_ftype) and general.quantization_version for GGUF's
// types; ferry.weight_type for ferry's own, which llama.cpp has no value for.
void set_weight_type_metadata(gguf::Writer& w, DType target);

}  // namespace ferry::cli
