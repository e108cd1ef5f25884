// Dispatch levels for kernel tests: which SIMD levels this machine can run, and guards that
// restore the level and activation mode a test started with.
#pragma once

#include <vector>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"

namespace ferry::testing {

// The SIMD levels of the target's architecture that the CPU has: AVX2, AVX-512 and AMX on x86,
// NEON on aarch64; with_scalar puts the scalar level first.
inline std::vector<kernels::cpu::CpuLevel> simd_levels(bool with_scalar = false) {
    using kernels::cpu::CpuLevel;
    std::vector<CpuLevel> out;
    if (with_scalar) out.push_back(CpuLevel::Scalar);
#if defined(__aarch64__)
    const CpuLevel levels[] = {CpuLevel::NEON};
#else
    const CpuLevel levels[] = {CpuLevel::AVX2, CpuLevel::AVX512, CpuLevel::AMX};
#endif
    for (CpuLevel l : levels)
        if (l <= kernels::cpu::detected_cpu_level()) out.push_back(l);
    return out;
}

struct LevelGuard {
    kernels::cpu::CpuLevel saved = kernels::cpu::cpu_level();
    ~LevelGuard() { kernels::cpu::set_cpu_level(saved); }
};

// Sets the activation mode for a scope and restores the one before.
struct ActivationsGuard {
    kernels::Activations saved = kernels::cpu::activations();
    explicit ActivationsGuard(kernels::Activations a) { kernels::cpu::set_activations(a); }
    ~ActivationsGuard() { kernels::cpu::set_activations(saved); }
};

// Sets whether short batches pair row groups for a scope and restores the setting before.
struct GroupPairingGuard {
    kernels::cpu::GroupPairing saved = kernels::cpu::group_pairing();
    explicit GroupPairingGuard(kernels::cpu::GroupPairing p) { kernels::cpu::set_group_pairing(p); }
    ~GroupPairingGuard() { kernels::cpu::set_group_pairing(saved); }
};

constexpr kernels::Activations kAllActivations[] = {
    kernels::Activations::F32, kernels::Activations::Int16, kernels::Activations::Int8};

}  // namespace ferry::testing
