// The element types the KV cache can hold, and how one row of a token's keys or values is
// stored in each:
//   f32   as computed (the baseline)
//   f16   IEEE half, no scale
//   int8  keys: x = s_c * q with one f32 scale per (layer, channel), fixed for the model
//         instance (calibrated, see engine/kv_calibration.h). Keys have a few outlier channels
//         of stable magnitude, so a per-token scale would spend the 8 bits on them and crush
//         the others; a per-channel scale cannot be computed per token, hence calibration.
//         values: x = s_t * q with one f32 scale per (token, KV head) = absmax / 127.
//   fp8   OCP E4M3 (max 448) with one f32 scale per (token, KV head) for keys and values.
// One (layer, block) region of keys or of values is laid out as
//   [block_size x stride elements][zero padding to 64 bytes][block_size x scales_per_pos f32]
// so a block's scales travel with its data (copy-on-write copies both) and the attention
// kernels find them from the block's base address alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ferry::quant {

enum class KvDType : uint8_t { F32 = 0, F16 = 1, Int8 = 2, FP8 = 3 };

constexpr float kInt8Max = 127.0f;
constexpr float kE4M3Max = 448.0f;

const char* kv_dtype_name(KvDType t);
std::optional<KvDType> parse_kv_dtype(std::string_view name);  // f32, f16, int8, fp8

inline size_t kv_elem_bytes(KvDType t) {
    return t == KvDType::F32 ? 4 : t == KvDType::F16 ? 2 : 1;
}
// Whether rows of keys (or values) carry a per-(token, KV head) scale.
inline bool kv_token_scales(KvDType t, bool key) {
    return t == KvDType::FP8 || (t == KvDType::Int8 && !key);
}
// Bytes from a region's start to its scales: the data, padded to 64 bytes.
inline size_t kv_scale_offset(KvDType t, int block_size, size_t stride) {
    return (static_cast<size_t>(block_size) * stride * kv_elem_bytes(t) + 63) / 64 * 64;
}
// Where one KV head's rows lie in a (layer, block) region: head h's row of the block's slot p
// starts at element h * head_stride + p * pos_stride; the per-token scales (when the type has
// them) at scale_offset bytes from the region's start.
struct KvBlockLayout {
    size_t pos_stride;
    size_t head_stride;
    size_t scale_offset;
};

// Bytes of one (layer, block) region of keys (key) or values.
inline size_t kv_region_bytes(KvDType t, bool key, int block_size, size_t stride,
                              int scales_per_pos) {
    if (!kv_token_scales(t, key)) return kv_scale_offset(t, block_size, stride);
    const size_t scales = static_cast<size_t>(block_size) * scales_per_pos * sizeof(float);
    return kv_scale_offset(t, block_size, stride) + (scales + 63) / 64 * 64;
}

// Scalar element conversions (the reference the SIMD kernels are tested against).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even; beyond the range: +-inf
float e4m3_to_f32(uint8_t e);  // exact; 0x7F / 0xFF are NaN
uint8_t f32_to_e4m3(float f);  // round to nearest even, saturating at +-448; NaN stays NaN

// Stores n floats of one (token, KV head) row as type t. `scale` receives the row's scale
// where the type has one per token; `channel_scale` (int8 keys) gives one per element.
// Returns how many elements were clipped (int8 keys beyond 127 steps of their channel).
int64_t quantize_kv_row(KvDType t, const float* x, int n, void* dst, float* scale,
                        const float* channel_scale);
// The inverse: n floats from a stored row and its scale(s).
void dequantize_kv_row(KvDType t, const void* src, int n, float scale, const float* channel_scale,
                       float* out);

}  // namespace ferry::quant
