#include "kernels/cpu/dispatch.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/attention_neon.h"

namespace ferry::kernels::cpu {
namespace {

CpuLevel detect() {
#if defined(__x86_64__)
    __builtin_cpu_init();
    // The AVX-512 level's integer dot products are VNNI; without it AVX2's maddubs is as good.
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vnni"))
        return amx_usable() ? CpuLevel::AMX : CpuLevel::AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        return CpuLevel::AVX2;
#elif defined(__aarch64__)
    return CpuLevel::NEON;  // Advanced SIMD is part of the aarch64 baseline
#endif
    return CpuLevel::Scalar;
}

// The level that runs when `want` is asked for on a CPU whose best is `have`: capped at `have`
// within one architecture; a level of the other architecture cannot run, so scalar.
CpuLevel clamp_level(CpuLevel want, CpuLevel have) {
    if (want == CpuLevel::Scalar || have == CpuLevel::Scalar) return CpuLevel::Scalar;
    if ((want == CpuLevel::NEON) != (have == CpuLevel::NEON)) return CpuLevel::Scalar;
    return want < have ? want : have;
}

CpuLevel initial_level() {
    const CpuLevel level = detect();
    const char* env = std::getenv("FERRY_CPU_LEVEL");
    if (!env || !*env) return level;
    CpuLevel want;
    if (!std::strcmp(env, "scalar"))
        want = CpuLevel::Scalar;
    else if (!std::strcmp(env, "neon"))
        want = CpuLevel::NEON;
    else if (!std::strcmp(env, "avx2"))
        want = CpuLevel::AVX2;
    else if (!std::strcmp(env, "avx512"))
        want = CpuLevel::AVX512;
    else if (!std::strcmp(env, "amx"))
        want = CpuLevel::AMX;
    else {
        // Said once, at start-up: a typo must not pass for a measurement at another level.
        std::fprintf(
            stderr,
            "ferry: FERRY_CPU_LEVEL=%s is not scalar, avx2, avx512, amx or neon; using %s\n", env,
            cpu_level_name(level));
        return level;
    }
    const CpuLevel got = clamp_level(want, level);
    if (got != want)
        std::fprintf(stderr, "ferry: FERRY_CPU_LEVEL=%s: this CPU runs at most %s; using %s\n", env,
                     cpu_level_name(level), cpu_level_name(got));
    return got;
}

Dispatch make_dispatch(CpuLevel level) {
    switch (level) {
        case CpuLevel::AMX:
            return {level, amx_kernels(), avx512_attend_rows()};
        case CpuLevel::AVX512:
            return {level, avx512_kernels(), avx512_attend_rows()};
        case CpuLevel::AVX2:
            return {level, avx2_kernels(), avx2_attend_rows()};
        case CpuLevel::NEON:
            return {level, neon_kernels(), neon_attend_rows()};
        default:
            return {CpuLevel::Scalar, nullptr, nullptr};
    }
}

Dispatch& current() {
    static Dispatch d = make_dispatch(initial_level());
    return d;
}

Activations initial_activations() {
    Activations a = Activations::Int16;
    if (const char* e = std::getenv("FERRY_ACTIVATIONS"); e && *e && !parse_activations(e, &a))
        std::fprintf(stderr, "ferry: FERRY_ACTIVATIONS=%s is not f32, int16 or int8; using %s\n", e,
                     activations_name(a));
    return a;
}

std::atomic<Activations>& default_activations() {
    static std::atomic<Activations> a{initial_activations()};
    return a;
}

GroupPairing initial_pairing() {
    const char* e = std::getenv("FERRY_PAIR_GROUPS");
    if (!e || !*e || std::strcmp(e, "auto") == 0) return GroupPairing::Auto;
    if (std::strcmp(e, "always") == 0) return GroupPairing::Always;
    if (std::strcmp(e, "never") == 0) return GroupPairing::Never;
    std::fprintf(stderr, "ferry: FERRY_PAIR_GROUPS=%s is not auto, always or never; using auto\n",
                 e);
    return GroupPairing::Auto;
}

std::atomic<GroupPairing>& pairing() {
    static std::atomic<GroupPairing> p{initial_pairing()};
    return p;
}

}  // namespace

GroupPairing group_pairing() {
    return pairing().load(std::memory_order_relaxed);
}
void set_group_pairing(GroupPairing p) {
    pairing().store(p);
}

const Dispatch& dispatch() {
    return current();
}

CpuLevel detected_cpu_level() {
    static const CpuLevel l = detect();
    return l;
}
CpuLevel cpu_level() {
    return current().level;
}
void set_cpu_level(CpuLevel l) {
    current() = make_dispatch(clamp_level(l, detected_cpu_level()));
}

const char* cpu_level_name(CpuLevel l) {
    switch (l) {
        case CpuLevel::AMX:
            return "amx";
        case CpuLevel::AVX512:
            return "avx512";
        case CpuLevel::AVX2:
            return "avx2";
        case CpuLevel::NEON:
            return "neon";
        default:
            return "scalar";
    }
}

Activations activations() {
    return default_activations().load(std::memory_order_relaxed);
}
void set_activations(Activations a) {
    default_activations().store(a);
}

}  // namespace ferry::kernels::cpu
