// The group grids GPTQ targets (q4_0, q4_1, int4_g32/64/128, int3_g32/64/128), split into the two
// steps GPTQ needs apart: fitting a group's parameters once, from the group's weights at that
// moment, and then rounding single values onto that fixed grid as error feedback changes them. The
// arithmetic is quantize_row's, float for float, so a group rounded here packs into the same
// bytes RTN would write for the same values, and the written file dequantizes to exactly the
// values GPTQ worked with.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ferry::quant {

// One group's grid: the fp16 fields as stored, and the floats the quantizer rounds with
// (ggml rounds against the unrounded scale and minimum, then stores them as fp16).
struct GroupParams {
    uint16_t d = 0;  // fp16 scale
    uint16_t m = 0;  // fp16 minimum (q4_1)
    uint8_t z = 0;   // zero point (int4, int3)
    float id = 0;    // q4_0, q4_1: 1 / unrounded scale
    float min = 0;   // q4_1: unrounded minimum
    float ds = 0;    // int4, int3: the stored scale as a float
};

// True for the types whose rows are independent groups of 4- or 3-bit codes under a per-group
// scale (and minimum or zero point): q4_0, q4_1 and ferry's int4 and int3.
bool has_group_grid(DType t);
int grid_group_size(DType t);  // 32 for q4_0/q4_1, G for int4_gG and int3_gG

// The grid quantize_row would pick for these grid_group_size(t) values.
GroupParams fit_group(DType t, const float* x);
// The code quantize_row would write for x on grid p, and the value it dequantizes to.
uint8_t round_to_grid(DType t, const GroupParams& p, float x);
float grid_value(DType t, const GroupParams& p, uint8_t code);
// Writes one group's block (row_bytes(t, G) bytes) from its grid and codes.
void pack_group(DType t, const GroupParams& p, const uint8_t* codes, void* dst);

}  // namespace ferry::quant
