// The per-level SIMD bodies of attend_paged_rows (attention_x86.inc, compiled once per target by
// attention_avx2.cpp and attention_avx512.cpp). Callers go through kernels/cpu/paged_attention.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/paged_attention.h"

namespace ferry::kernels::cpu {

// Rows one call may take (the kernel keeps per-row state on its stack).
constexpr int kMaxAttendRows = 64;

// scratch: attend_rows_scratch_floats(n_rows, max n_kv, head_dim) floats.
using AttendRowsFn = void (*)(const AttnRow* rows, int n_rows, const PagedKvView& kv, int head_dim,
                              float scale, float* scratch);

// Scores padded to whole vectors for every row, plus a zero-padded copy of each query and its
// output accumulator (16 floats: the widest vector either level uses), plus key rows (16) and
// value rows (32, the value pass's chunk) converted from a narrower cache type.
inline size_t attend_rows_scratch_floats(int n_rows, int64_t max_n_kv, int head_dim) {
    const size_t kv = static_cast<size_t>((max_n_kv + 15) / 16 * 16);
    const size_t hd = static_cast<size_t>((head_dim + 15) / 16 * 16);
    return static_cast<size_t>(n_rows) * (kv + 2 * hd) + (16 + 32) * hd;
}

AttendRowsFn avx2_attend_rows();    // nullptr where not compiled (non-x86)
AttendRowsFn avx512_attend_rows();  // nullptr where not compiled (non-x86)

}  // namespace ferry::kernels::cpu
