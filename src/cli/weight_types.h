// The weight types `ferry quantize`, `ferry synth` and --weights take, spelled the same way:
// parsing a --type and the file-type metadata llama.cpp's tools read. (The type a row that does
// not split into the target's blocks falls back to is quant::fallback_for.)
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "gguf/gguf_writer.h"
#include "quant/k_quant_mix.h"

namespace ferry::cli {

// A --type name (q8_0, q4_k, f16, int8, ...); `int4` names ferry's int4 family, whose member
// group_size picks (32, 64 or 128).
Expected<DType> parse_weight_type(const std::string& name, int group_size = 128);

// What --type asks of `ferry quantize` and `ferry synth`: one type for every matrix, or one of
// llama.cpp's k-quant mixes (q4_k_m, q5_k_m), whose matrices take their types by
// quant::k_mix_type.
struct WeightTarget {
    DType base;  // every matrix's type, or the mix's base type
    std::optional<quant::KMix> mix;
};
Expected<WeightTarget> parse_weight_target(const std::string& name, int group_size = 128);

// general.file_type (llama.cpp's llama_ftype) and general.quantization_version for GGUF's
// types; ferry.weight_type for ferry's own, which llama.cpp has no value for.
void set_weight_type_metadata(gguf::Writer& w, DType target);
void set_weight_type_metadata(gguf::Writer& w, const WeightTarget& target);

}  // namespace ferry::cli
