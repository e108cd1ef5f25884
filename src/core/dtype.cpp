#include "core/dtype.h"

#include <array>

namespace ferry {
namespace {

constexpr std::array kTypes = {
    DTypeInfo{DType::F32, "f32", 1, 4, true, 0},
    DTypeInfo{DType::F16, "f16", 1, 2, true, 0},
    DTypeInfo{DType::Q4_0, "q4_0", 32, 18, true, 0},
    DTypeInfo{DType::Q4_1, "q4_1", 32, 20, true, 0},
    DTypeInfo{DType::Q5_0, "q5_0", 32, 22, true, 0},
    DTypeInfo{DType::Q5_1, "q5_1", 32, 24, true, 0},
    DTypeInfo{DType::Q8_0, "q8_0", 32, 34, true, 0},
    DTypeInfo{DType::Q8_1, "q8_1", 32, 36, false, 0},
    DTypeInfo{DType::Q2_K, "q2_k", 256, 84, false, 0},
    DTypeInfo{DType::Q3_K, "q3_k", 256, 110, false, 0},
    DTypeInfo{DType::Q4_K, "q4_k", 256, 144, true, 0},
    DTypeInfo{DType::Q5_K, "q5_k", 256, 176, true, 0},
    DTypeInfo{DType::Q6_K, "q6_k", 256, 210, true, 0},
    DTypeInfo{DType::Q8_K, "q8_k", 256, 292, false, 0},
    DTypeInfo{DType::I8, "i8", 1, 1, false, 0},
    DTypeInfo{DType::I16, "i16", 1, 2, false, 0},
    DTypeInfo{DType::I32, "i32", 1, 4, false, 0},
    DTypeInfo{DType::I64, "i64", 1, 8, false, 0},
    DTypeInfo{DType::F64, "f64", 1, 8, false, 0},
    DTypeInfo{DType::BF16, "bf16", 1, 2, true, 0},
    // ferry's own (quant/ferry_types.h): an f32 scale heads every row, or a 4-byte group header.
    DTypeInfo{DType::INT8, "int8", 1, 1, true, 4},
    DTypeInfo{DType::FP8, "fp8", 1, 1, true, 4},
    DTypeInfo{DType::INT4_G32, "int4_g32", 32, 4 + 16, true, 0},
    DTypeInfo{DType::INT4_G64, "int4_g64", 64, 4 + 32, true, 0},
    DTypeInfo{DType::INT4_G128, "int4_g128", 128, 4 + 64, true, 0},
    DTypeInfo{DType::W8A8, "w8a8", 1, 1, true, 8},  // f32 scale + i32 sum of the row's values
    DTypeInfo{DType::INT3_G32, "int3_g32", 32, 4 + 12, true, 0},
    DTypeInfo{DType::INT3_G64, "int3_g64", 64, 4 + 24, true, 0},
    DTypeInfo{DType::INT3_G128, "int3_g128", 128, 4 + 48, true, 0},
    DTypeInfo{DType::INT4S_G32, "int4s_g32", 32, 4 + 12, true, 0},
    DTypeInfo{DType::INT4S_G64, "int4s_g64", 64, 4 + 24, true, 0},
    DTypeInfo{DType::INT4S_G128, "int4s_g128", 128, 4 + 48, true, 0},
};

}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t id) {
    for (const auto& t : kTypes)
        if (static_cast<uint32_t>(t.type) == id) return t;
    return std::nullopt;
}

const DTypeInfo& dtype_info(DType t) {
    for (const auto& i : kTypes)
        if (i.type == t) return i;
    return kTypes[0];  // unreachable for a valid enum value
}

std::string_view dtype_name(DType t) {
    return dtype_info(t).name;
}

std::optional<DType> dtype_from_name(std::string_view name) {
    for (const auto& t : kTypes)
        if (t.name == name) return t.type;
    return std::nullopt;
}

}  // namespace ferry
