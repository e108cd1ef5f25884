// The one place the CPU's SIMD level is chosen, and with it every kernel family that has
// per-level code: the matmul / norm / rope / softmax table (simd.h's LevelKernels, with the
// f16 row conversion of KV writes) and the paged-attention body. The level is detected once
// from CPUID (x86) or is NEON (aarch64, where it is mandatory), and can be lowered with
// FERRY_CPU_LEVEL=scalar|avx2|avx512|amx|neon for tests and comparisons. AMX is AVX-512 with the
// packed integer matmul's larger batches on AMX-INT8 tiles (bit for bit AVX-512's results). The
// process-wide mode in which quantized weights meet activations (FERRY_ACTIVATIONS) is the CPU
// backend's default.
#pragma once

#include "kernels/backend.h"
#include "kernels/cpu/attention_x86.h"
#include "kernels/cpu/simd.h"

namespace ferry::kernels::cpu {

// Levels are ordered within one architecture, and Scalar is below every SIMD level. NEON sits
// below the x86 levels, so a `level > detected_cpu_level()` check skips AVX2 and AVX-512 on ARM.
enum class CpuLevel { Scalar = 0, NEON = 1, AVX2 = 2, AVX512 = 3, AMX = 4 };

CpuLevel detected_cpu_level();  // what this CPU supports
CpuLevel cpu_level();           // what is used (FERRY_CPU_LEVEL may lower it)
// For tests; clamped to what the CPU supports (a level of another architecture: scalar).
void set_cpu_level(CpuLevel l);
const char* cpu_level_name(CpuLevel l);

// The kernels of the level in use: nullptr / null entries where only the scalar reference
// exists (the scalar level, a type or head size a level has no path for).
struct Dispatch {
    CpuLevel level = CpuLevel::Scalar;
    const LevelKernels* ops = nullptr;
    AttendRowsFn attend_rows = nullptr;
};
const Dispatch& dispatch();

// The default mode quantized weights meet activations in (FERRY_ACTIVATIONS, else int16):
// what the CPU kernels use when not told, and what a CPU backend starts with.
Activations activations();
void set_activations(Activations a);

}  // namespace ferry::kernels::cpu
