// Element types of tensors as GGUF numbers them (the ggml type ids), plus ferry's own weight
// types under ids far above ggml's (docs/quantization.md), with the row geometry every kernel
// and size computation needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ferry {

enum class DType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    BF16 = 30,
    // ferry's own types. GGUF has no per-output-channel formats, so these ids are ferry's; 1024
    // leaves ggml room to grow. llama.cpp refuses files that use them.
    INT8 = 1024,        // per-row f32 scale in a row header, int8 values
    FP8 = 1025,         // per-row f32 scale in a row header, OCP E4M3 values
    INT4_G32 = 1026,    // groups of 32: fp16 scale, u8 zero point, 4-bit values
    INT4_G64 = 1027,    // groups of 64
    INT4_G128 = 1028,   // groups of 128
    W8A8 = 1029,        // int8 as INT8 plus the row's sum of values; activations go 8-bit too
    INT3_G32 = 1030,    // groups of 32: fp16 scale, u8 zero point, 3-bit values
    INT3_G64 = 1031,    // groups of 64
    INT3_G128 = 1032,   // groups of 128
    INT4S_G32 = 1033,   // 2:4 sparse int4: groups of 32, 2 of every 4 values stored + indices
    INT4S_G64 = 1034,   // groups of 64
    INT4S_G128 = 1035,  // groups of 128
};

struct DTypeInfo {
    DType type;
    std::string_view name;  // lower-case, as llama.cpp prints it ("q4_1")
    int block_size;         // elements per block (1 for plain types)
    int block_bytes;        // bytes per block
    bool supported;         // ferry can dequantize / compute with it
    int row_header;         // bytes before a row's first block (its per-row scale), else 0
};

// nullopt for an id GGUF does not define or ferry does not know.
std::optional<DTypeInfo> dtype_info(uint32_t id);
const DTypeInfo& dtype_info(DType t);
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes taken by a row of n elements; n must be a multiple of the block size. A type with a
// row header describes whole rows only: its data cannot be cut mid-row.
inline size_t row_bytes(const DTypeInfo& info, int64_t n) {
    return static_cast<size_t>(info.row_header) +
           static_cast<size_t>(n / info.block_size) * static_cast<size_t>(info.block_bytes);
}
inline size_t row_bytes(DType t, int64_t n) {
    return row_bytes(dtype_info(t), n);
}

}  // namespace ferry
