#include "kernels/cpu/ops.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/packed_weights.h"
#include "kernels/cpu/reference.h"
#include "kernels/cpu/simd.h"
#include "quant/dequantize.h"

namespace ferry::kernels::cpu {
namespace {

const LevelKernels* table() {
    return dispatch().ops;
}

void reference_rows(const Weight& w, const float* x, int64_t n_tokens, float* y, int64_t ldy,
                    int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = w.row(r);
        for (int64_t t = 0; t < n_tokens; ++t)
            y[t * ldy + r] = ref::vec_dot(w.type, row, x + t * w.cols, w.cols);
    }
}

// Quantizes n_tokens rows of cols floats into the calling thread's buffer; prompt-sized
// batches are split over the pool.
const ActBlock* quantize_act_rows(const LevelKernels* lk, const float* x, int64_t cols,
                                  int64_t n_tokens, Activations a, ThreadPool& pool) {
    thread_local std::vector<ActBlock> buf;
    const int64_t nb = cols / 32;
    if (static_cast<int64_t>(buf.size()) < nb * n_tokens) buf.resize(nb * n_tokens);
    ActBlock* out = buf.data();
    auto run = [&](int64_t t0, int64_t t1) {
        if (lk && lk->quantize_act)
            lk->quantize_act(x + t0 * cols, out + t0 * nb, cols * (t1 - t0), a);
        else
            ref::quantize_act(x + t0 * cols, out + t0 * nb, cols * (t1 - t0), a);
    };
    if (n_tokens < 8)
        run(0, n_tokens);
    else
        pool.parallel_for(n_tokens, run);
    return out;
}

void reference_act_rows(const Weight& w, const ActBlock* x, Activations a, int64_t n_tokens,
                        float* y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = w.cols / 32;
    for (int64_t r = r0; r < r1; ++r)
        for (int64_t t = 0; t < n_tokens; ++t)
            y[t * ldy + r] = ref::dot_act(w.type, w.row(r), x + t * nb, nb, a);
}

// w8a8's activations, one scale per token, in the calling thread's buffer (rows padded to 64
// bytes so each token's values start aligned for the vector loads).
TokenQ8 quantize_tokens(const LevelKernels* lk, const float* x, int64_t cols, int64_t n_tokens,
                        ThreadPool& pool) {
    thread_local std::vector<int8_t> q;
    thread_local std::vector<float> d;
    const int64_t stride = (cols + 63) / 64 * 64;
    if (static_cast<int64_t>(q.size()) < stride * n_tokens) q.resize(stride * n_tokens);
    if (static_cast<int64_t>(d.size()) < n_tokens) d.resize(n_tokens);
    int8_t* qp = q.data();
    float* dp = d.data();
    auto run = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
            lk->quantize_token_q8(x + t * cols, cols, qp + t * stride, dp + t);
    };
    if (n_tokens < 8)
        run(0, n_tokens);
    else
        pool.parallel_for(n_tokens, run);
    return TokenQ8{qp, dp, stride};
}

// Rows handed to a thread come in multiples of this, so neither a float tile nor a packed
// group of rows is ever split.
constexpr int64_t kRowGrain = kPackRows;

}  // namespace

float* scratch_floats(size_t n) {
    thread_local std::vector<float> buf;
    // 16 floats more, so the start can move up to a 64-byte boundary (vector's own is 16).
    if (buf.size() < n + 16) buf.resize(n + 16);
    const auto p = reinterpret_cast<uintptr_t>(buf.data());
    return reinterpret_cast<float*>((p + 63) & ~static_cast<uintptr_t>(63));
}

bool dequantize_row_f32(DType type, const void* src, float* dst, int64_t n) {
    return static_cast<bool>(quant::dequantize_row(type, src, dst, n));
}

void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
    matmul(w, x, n_tokens, y, pool, activations());
}

void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            Activations act) {
    const MatmulTarget out{w, y};
    matmul_many(std::span<const MatmulTarget>(&out, 1), x, n_tokens, pool, act);
}

void matmul_many(std::span<const MatmulTarget> outs, const float* x, int64_t n_tokens,
                 ThreadPool& pool, Activations act) {
    if (outs.empty() || n_tokens <= 0) return;
    const LevelKernels* lk = table();
    const int64_t cols = outs[0].w.cols;
    // Packed types meet integer activations unless they are set to F32; quantized once for
    // every output of the group.
    const ActBlock* xa = nullptr;
    bool need_a = false;
    for (const auto& o : outs) need_a |= packable(o.w.type);
    if (need_a && act != Activations::F32 && cols % 32 == 0)
        xa = quantize_act_rows(lk, x, cols, n_tokens, act, pool);
    // w8a8 always quantizes its activations: that is what the type means.
    TokenQ8 xt;
    bool need_t = false;
    for (const auto& o : outs) need_t |= o.w.type == DType::W8A8;
    if (lk && need_t && lk->quantize_token_q8 && lk->matmul_w8a8)
        xt = quantize_tokens(lk, x, cols, n_tokens, pool);

    // The outputs' rows are one index space split evenly over the threads: one wake-up and
    // one barrier for q, k and v together instead of three.
    int64_t total = 0;
    for (const auto& o : outs) total += o.w.rows;
    const int n_threads = pool.size();
    auto work = [&](int64_t b, int64_t e) {
        int64_t base = 0;
        for (const auto& o : outs) {
            const int64_t r0 = std::max<int64_t>(b - base, 0);
            const int64_t r1 = std::min<int64_t>(e - base, o.w.rows);
            base += o.w.rows;
            if (r0 >= r1) continue;
            if (o.w.type == DType::W8A8 && xt.q) {
                lk->matmul_w8a8(o.w, xt, n_tokens, o.y, o.w.rows, r0, r1);
                continue;
            }
            if (xa && packable(o.w.type)) {
                // Packed groups of 16 rows are never split (kRowGrain), which the kernels need.
                assert(r0 % kPackRows == 0);
                if (!lk || !lk->matmul_packed || !o.w.packed ||
                    !lk->matmul_packed(o.w, xa, act, n_tokens, o.y, o.w.rows, r0, r1))
                    reference_act_rows(o.w, xa, act, n_tokens, o.y, o.w.rows, r0, r1);
                continue;
            }
            if (!lk || !lk->matmul_rows(o.w, x, n_tokens, o.y, o.w.rows, r0, r1))
                reference_rows(o.w, x, n_tokens, o.y, o.w.rows, r0, r1);
        }
    };
    if (n_threads == 1 || total <= kRowGrain) {
        work(0, total);
        return;
    }
    // A few tasks per thread, claimed dynamically: a thread that starts late (its core busy)
    // or runs slower just takes fewer, instead of everyone waiting for its fixed share.
    const int64_t n = total >= 64 * 4 * n_threads ? 4 * n_threads : n_threads;
    // Boundaries rounded to the grain, but kept inside each output so no output's tail tile
    // is shared between tasks.
    auto bound = [&](int64_t i) {
        if (i >= n) return total;
        const int64_t target = total * i / n;
        int64_t base = 0;
        for (const auto& o : outs) {
            if (target < base + o.w.rows) {
                const int64_t local = (target - base + kRowGrain / 2) / kRowGrain * kRowGrain;
                return base + std::min<int64_t>(local, o.w.rows);
            }
            base += o.w.rows;
        }
        return total;
    };
    pool.run_tasks(n, [&](int64_t t) {
        const int64_t b = bound(t), e = bound(t + 1);
        if (b < e) work(b, e);
    });
}

void get_row(const Weight& w, int64_t r, float* out) {
    (void)quant::dequantize_row(w.type, w.row(r), out, w.cols);
}

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps) {
    if (const LevelKernels* lk = table()) return lk->rmsnorm(x, weight, out, n, eps);
    ref::rmsnorm(x, weight, out, n, eps);
}

void rope_angles(int64_t pos, std::span<const double> inv_freq, float scale, float* cos_sin) {
    // In double, so long positions stay exact.
    for (size_t i = 0; i < inv_freq.size(); ++i) {
        const double theta = static_cast<double>(pos) * inv_freq[i];
        cos_sin[2 * i] = static_cast<float>(scale * std::cos(theta));
        cos_sin[2 * i + 1] = static_cast<float>(scale * std::sin(theta));
    }
}

void rope(float* x, int n_heads, int head_dim, int rope_dim, const float* cos_sin,
          RopeStyle style) {
    if (const LevelKernels* lk = table())
        return lk->rope(x, n_heads, head_dim, rope_dim, cos_sin, style);
    ref::rope(x, n_heads, head_dim, rope_dim, cos_sin, style);
}

void silu_mul(float* gate, const float* up, int64_t n) {
    if (const LevelKernels* lk = table()) return lk->silu_mul(gate, up, n);
    ref::silu_mul(gate, up, n);
}

void gelu_mul(float* gate, const float* up, int64_t n) {
    if (const LevelKernels* lk = table()) return lk->gelu_mul(gate, up, n);
    ref::gelu_mul(gate, up, n);
}

void softmax(float* x, int64_t n) {
    if (const LevelKernels* lk = table()) return lk->softmax(x, n);
    ref::softmax(x, n);
}

int64_t argmax(const float* x, int64_t n) {
    if (const LevelKernels* lk = table()) return lk->argmax(x, n);
    return ref::argmax(x, n);
}

double sum_double(const float* x, int64_t n, float floor) {
    if (const LevelKernels* lk = table(); lk && lk->sum_double) return lk->sum_double(x, n, floor);
    return ref::sum_double(x, n, floor);
}

void attend(const float* q, const float* k, const float* v, size_t stride, int64_t n_kv,
            int head_dim, float scale, float* out) {
    if (const LevelKernels* lk = table())
        if (lk->attend(q, k, v, stride, n_kv, head_dim, scale, out)) return;
    ref::attend(q, k, v, stride, n_kv, head_dim, scale, out);
}

void f32_to_f16_row(const float* x, int64_t n, uint16_t* out) {
    if (const LevelKernels* lk = table(); lk && lk->f32_to_f16_row)
        return lk->f32_to_f16_row(x, n, out);
    for (int64_t i = 0; i < n; ++i) out[i] = quant::f32_to_f16(x[i]);
}

}  // namespace ferry::kernels::cpu
