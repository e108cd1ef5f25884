// The per-level kernel tables the dispatcher in kernels.cpp chooses between. Each x86 level is
// one translation unit compiled with its own target pragma (avx2_kernels.cpp,
// avx512_kernels.cpp) from the shared body x86_kernels.inc, so the binary stays portable. NEON
// (neon_kernels.cpp) is the aarch64 baseline and needs no pragma.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/quantize_activations.h"

namespace ferry::kernels::cpu {

struct LevelKernels {
    // n floats (a multiple of 32) into n / 32 blocks, exactly as ref::quantize_act does.
    void (*quantize_act)(const float* x, ActBlock* out, int64_t n, Activations a);
    // Packed rows (kernels/cpu/packed_weights.h) [r0, r1) of w against activations on grid a:
    // y[t * ldy + r] = ref::dot_act(w.type, row r, x + t * (w.cols / 32), w.cols / 32, a), bit
    // for bit. r0 is a multiple of kPackRows. False for a type the level has no such path for.
    bool (*matmul_packed)(const Weight& w, const ActBlock* x, Activations a, int64_t n_tokens,
                          float* y, int64_t ldy, int64_t r0, int64_t r1);
    // y[t * ldy + r] for r in [r0, r1), t in [0, n_tokens), float activations (x: n_tokens rows
    // of w.cols floats). Returns false for a weight type this level has no path for (the
    // caller falls back to the reference).
    bool (*matmul_rows)(const Weight& w, const float* x, int64_t n_tokens, float* y, int64_t ldy,
                        int64_t r0, int64_t r1);
    void (*rmsnorm)(const float* x, const float* weight, float* out, int64_t n, float eps);
    void (*silu_mul)(float* gate, const float* up, int64_t n);
    void (*gelu_mul)(float* gate, const float* up, int64_t n);
    // exactly ref::rope's bits
    void (*rope)(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_sin,
                 RopeStyle style);
    void (*softmax)(float* x, int64_t n);
    // false for a head_dim the level does not handle (the caller uses the reference)
    bool (*attend)(const float* q, const float* k, const float* v, size_t stride, int64_t n_kv,
                   int head_dim, float scale, float* out);
    // w8a8 weights (nullptr where a level has none: the reference computes them). One token's
    // n values quantized as ref::quantize_token_q8 does (same q, same d), and the product with
    // activations so quantized.
    void (*quantize_token_q8)(const float* x, int64_t n, int8_t* q, float* d);
    void (*matmul_w8a8)(const Weight& w, const TokenQ8& x, int64_t n_tokens, float* y, int64_t ldy,
                        int64_t r0, int64_t r1);
    int64_t (*argmax)(const float* x, int64_t n);  // exactly ref::argmax's index
    // ref::sum_double's sum to a double's rounding (nullptr: the reference)
    double (*sum_double)(const float* x, int64_t n, float floor);
    // n floats to halves, bit for bit quant::f32_to_f16's (nullptr: the scalar conversion)
    void (*f32_to_f16_row)(const float* x, int64_t n, uint16_t* out);
};

const LevelKernels* avx2_kernels();    // nullptr where not compiled (non-x86)
const LevelKernels* avx512_kernels();  // needs AVX-512 F/BW/VL + VNNI
const LevelKernels* neon_kernels();    // nullptr where not compiled (non-aarch64)
// AVX-512's table with the packed matmul's batches of 12+ tokens and w8a8 on AMX-INT8 tiles;
// nullptr where not compiled. amx_usable, on a CPU that runs the AVX-512 level: it also has VBMI2
// and AMX-INT8, and the OS granted the tile state to this process (asked once; call before
// amx_kernels runs).
const LevelKernels* amx_kernels();
bool amx_usable();

// Whether the AVX-512 integer matmul runs two 16-row groups side by side on a short batch (they
// share each activation broadcast): from the widths this CPU's vendor was measured to gain at
// (auto), or from 2 tokens (always) or never. The bits are the same either way; the setting is
// for tests and comparisons, and FERRY_PAIR_GROUPS=auto|always|never sets it at start.
enum class GroupPairing : uint8_t { Auto, Always, Never };
GroupPairing group_pairing();
void set_group_pairing(GroupPairing p);

// A per-thread scratch buffer of at least n floats, 64-byte aligned; reused across calls.
float* scratch_floats(size_t n);

// quant::dequantize_row without Status crossing into the target-pragma translation units.
bool dequantize_row_f32(DType type, const void* src, float* dst, int64_t n);

}  // namespace ferry::kernels::cpu
