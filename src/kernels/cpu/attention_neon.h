// The aarch64 NEON body of attend_paged_rows (attention_neon.cpp). It has the x86 bodies'
// signature and scratch (AttendRowsFn, attend_rows_scratch_floats in attention_x86.h), so
// paged_attention.cpp dispatches to all of them the same way.
#pragma once

#include "kernels/cpu/attention_x86.h"

namespace ferry::kernels::cpu {

AttendRowsFn neon_attend_rows();  // nullptr where not compiled (non-aarch64)

}  // namespace ferry::kernels::cpu
