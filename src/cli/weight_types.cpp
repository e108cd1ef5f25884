#include "cli/weight_types.h"

#include "quant/ferry_types.h"
#include "quant/quantize.h"

namespace ferry::cli {
namespace {

// llama.cpp's llama_ftype for a file whose matrices are all `t`; tools show it as the
// file's type, and nothing depends on it for loading.
uint32_t file_type_for(DType t) {
    switch (t) {
        case DType::F32:
            return 0;
        case DType::F16:
            return 1;
        case DType::Q4_0:
            return 2;
        case DType::Q4_1:
            return 3;
        case DType::Q8_0:
            return 7;
        case DType::Q5_0:
            return 8;
        case DType::Q5_1:
            return 9;
        case DType::Q4_K:
            return 14;  // Q4_K_S: every matrix Q4_K
        case DType::Q5_K:
            return 16;  // Q5_K_S
        case DType::Q6_K:
            return 18;
        case DType::BF16:
            return 32;
        default:
            return 0;
    }
}

}  // namespace

Expected<DType> parse_weight_type(const std::string& name, int group_size) {
    if (name == "int4" || name == "int3" || name == "int4s") {
        const int i = group_size == 32 ? 0 : group_size == 64 ? 1 : group_size == 128 ? 2 : -1;
        if (i < 0)
            return make_error("--group-size {}: {} groups are 32, 64 or 128", group_size, name);
        static constexpr DType kInt4[] = {DType::INT4_G32, DType::INT4_G64, DType::INT4_G128};
        static constexpr DType kInt3[] = {DType::INT3_G32, DType::INT3_G64, DType::INT3_G128};
        static constexpr DType kInt4S[] = {DType::INT4S_G32, DType::INT4S_G64, DType::INT4S_G128};
        return name == "int4" ? kInt4[i] : name == "int3" ? kInt3[i] : kInt4S[i];
    }
    if (name == "q4_k_m" || name == "q5_k_m")
        return make_error(
            "{}: llama.cpp's mix of {} and q6_k is written by ferry quantize and ferry synth; "
            "here name one type",
            name, name.substr(0, 4));
    auto t = dtype_from_name(name);
    if (!t || !quant::can_quantize(*t))
        return make_error(
            "--type {}: not a type ferry writes (q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, "
            "f16, bf16, f32; llama.cpp's mixes q4_k_m, q5_k_m; ferry's own: int8, int4, int3, "
            "int4s (2:4 sparse), fp8, w8a8)",
            name);
    return *t;
}

Expected<WeightTarget> parse_weight_target(const std::string& name, int group_size) {
    if (name == "q4_k_m") return WeightTarget{DType::Q4_K, quant::KMix::Q4_K_M};
    if (name == "q5_k_m") return WeightTarget{DType::Q5_K, quant::KMix::Q5_K_M};
    auto t = parse_weight_type(name, group_size);
    if (!t) return t.error();
    return WeightTarget{*t, std::nullopt};
}

void set_weight_type_metadata(gguf::Writer& w, DType target) {
    if (quant::is_ferry_type(target)) {
        // llama_ftype has no value for these; a stale one would misdescribe the file.
        w.remove("general.file_type");
        w.remove("general.quantization_version");
        w.set("ferry.weight_type", gguf::make_string(std::string(dtype_name(target))));
    } else {
        w.remove("ferry.weight_type");
        w.set("general.file_type", gguf::make_u32(file_type_for(target)));
        if (dtype_info(target).block_size > 1)
            w.set("general.quantization_version", gguf::make_u32(2));
        else
            w.remove("general.quantization_version");
    }
}

void set_weight_type_metadata(gguf::Writer& w, const WeightTarget& target) {
    set_weight_type_metadata(w, target.base);
    if (target.mix) w.set("general.file_type", gguf::make_u32(quant::k_mix_file_type(*target.mix)));
}

}  // namespace ferry::cli
