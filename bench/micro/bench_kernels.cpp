// Kernel micro-benchmarks: matmul per weight type at decode (1 token) and prefill (64 tokens)
// shapes of the default model, the pool's wake-up + barrier, and attention. Counters: GB/s of
// weights read, GFLOP/s of multiply-adds (2 flops each). FERRY_CPU_LEVEL picks the level,
// FERRY_ACTIVATIONS the activations the block types meet (int16 by default).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/packed_weights.h"
#include "quant/dequantize.h"
#include "quant/ferry_types.h"

namespace {
using namespace ferry;

struct Mat {
    std::vector<uint8_t> bytes;
    kernels::cpu::Weight w;
    kernels::cpu::PackedWeight
        packed;  // what the model packs (Q4_0/Q4_1/Q8_0), for the integer path
};

Mat make(DType type, int64_t rows, int64_t cols) {
    Mat m;
    const size_t stride = row_bytes(type, cols);
    m.bytes.resize(stride * rows);
    std::mt19937 rng(1);
    for (auto& b : m.bytes) b = static_cast<uint8_t>(rng());
    // Keep scales and floats finite: rewrite every fp16/bf16 word that would be NaN/Inf.
    if (type == DType::F32) {
        float* f = reinterpret_cast<float*>(m.bytes.data());
        for (size_t i = 0; i < m.bytes.size() / 4; ++i)
            f[i] = static_cast<float>(rng() % 1000) / 1000.0f;
    } else {
        uint16_t* h = reinterpret_cast<uint16_t*>(m.bytes.data());
        for (size_t i = 0; i < m.bytes.size() / 2; ++i)
            if ((h[i] & 0x7C00) == 0x7C00 || (h[i] & 0x7F80) == 0x7F80) h[i] = 0x3000;  // 0.125
    }
    if (quant::is_int4s(type))  // valid positions (0, 1 and 2, 3) in every quartet
        for (size_t b = 0; b < m.bytes.size();
             b += static_cast<size_t>(dtype_info(type).block_bytes))
            for (int c = 0; c < dtype_info(type).block_size / 32; ++c)
                for (int j = 0; j < 4; ++j) m.bytes[b + 4 + 12 * c + 8 + j] = 0xE4;
    m.w = kernels::cpu::Weight{type, m.bytes.data(), rows, cols, stride};
    if (kernels::cpu::packable(type)) {
        m.packed = kernels::cpu::PackedWeight(m.w);
        m.w.packed = m.packed.data();
    }
    return m;
}

void BM_Matmul(benchmark::State& st, DType type, int64_t rows, int64_t cols) {
    const int64_t nt = st.range(0);
    const int threads = static_cast<int>(st.range(1));
    Mat m = make(type, rows, cols);
    std::vector<float> x(nt * cols), y(nt * rows);
    std::mt19937 rng(2);
    for (auto& v : x) v = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
    ThreadPool pool(threads);
    for (auto _ : st) {
        kernels::cpu::matmul(m.w, x.data(), nt, y.data(), pool);
        benchmark::DoNotOptimize(y.data());
    }
    const double bytes = static_cast<double>(m.bytes.size());
    st.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * rows * cols * nt, benchmark::Counter::kIsIterationInvariantRate,
                           benchmark::Counter::kIs1000);
    st.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                             benchmark::Counter::kIs1000);
    std::string label = kernels::cpu::cpu_level_name(kernels::cpu::cpu_level());
    if (kernels::cpu::packable(type))
        label += std::string(" ") + kernels::activations_name(kernels::cpu::activations());
    st.SetLabel(label);
}

// Decode and prefill shapes: ffn_down-like 576 x 1536, ffn_up-like 1536 x 576, and the tied
// 49152 x 576 Q8_0 output head that is ~28% of a token's bytes.
#define FERRY_MATMUL(name, type, rows, cols)             \
    BENCHMARK_CAPTURE(BM_Matmul, name, type, rows, cols) \
        ->ArgsProduct({{1, 64}, {1, 2}})                 \
        ->ArgNames({"tokens", "threads"})                \
        ->UseRealTime()
FERRY_MATMUL(q4_1_1536x576, DType::Q4_1, 1536, 576);
FERRY_MATMUL(q4_1_576x1536, DType::Q4_1, 576, 1536);
FERRY_MATMUL(q4_1_65536x1536, DType::Q4_1, 65536, 1536);  // 60 MB: from memory, not cache
FERRY_MATMUL(q4_0_1536x576, DType::Q4_0, 1536, 576);
// 1-8 B model shapes, from memory: rows of 2048 (TinyLlama, Llama-3.2-1B) and 4096 (8 B).
FERRY_MATMUL(q4_0_65536x2048, DType::Q4_0, 65536, 2048);
// 2:4 sparse int4 against int4 on the same groups: 3/4 of the bytes, the same values.
FERRY_MATMUL(int4_g64_65536x2048, DType::INT4_G64, 65536, 2048);
FERRY_MATMUL(int4s_g64_65536x2048, DType::INT4S_G64, 65536, 2048);
FERRY_MATMUL(int4_g64_1536x576, DType::INT4_G64, 1536, 576);
FERRY_MATMUL(int4s_g64_1536x576, DType::INT4S_G64, 1536, 576);
FERRY_MATMUL(q8_0_32768x2048, DType::Q8_0, 32768, 2048);
FERRY_MATMUL(q4_k_65536x2048, DType::Q4_K, 65536, 2048);
FERRY_MATMUL(q6_k_32768x2048, DType::Q6_K, 32768, 2048);
// The Q5s (Q5_K_M files' most matrices, and llama.cpp's fallbacks): 5.5-6 bits a weight.
FERRY_MATMUL(q5_k_65536x2048, DType::Q5_K, 65536, 2048);
FERRY_MATMUL(q5_0_65536x2048, DType::Q5_0, 65536, 2048);
FERRY_MATMUL(q5_1_65536x2048, DType::Q5_1, 65536, 2048);
FERRY_MATMUL(q5_k_1536x768, DType::Q5_K, 1536, 768);
FERRY_MATMUL(q4_0_14336x4096, DType::Q4_0, 14336, 4096);
FERRY_MATMUL(q8_0_49152x576, DType::Q8_0, 49152, 576);
FERRY_MATMUL(q8_0_1536x576, DType::Q8_0, 1536, 576);
FERRY_MATMUL(q4_k_1536x768, DType::Q4_K, 1536, 768);
FERRY_MATMUL(q6_k_1536x768, DType::Q6_K, 1536, 768);
FERRY_MATMUL(f16_1536x576, DType::F16, 1536, 576);
FERRY_MATMUL(f16_49152x576, DType::F16, 49152, 576);  // an F16 head: from memory, not cache
FERRY_MATMUL(bf16_1536x576, DType::BF16, 1536, 576);
FERRY_MATMUL(f32_1536x576, DType::F32, 1536, 576);
// w8a8: one integer sum per row and token (the AMX level keeps it in its tiles).
FERRY_MATMUL(w8a8_1536x576, DType::W8A8, 1536, 576);
FERRY_MATMUL(w8a8_5632x2048, DType::W8A8, 5632, 2048);

// Small batches, the widths a speculative verification or a few decoding sequences run at: what
// one more token costs over one (the speculation cost policy plans with exactly this).
#define FERRY_MATMUL_NARROW(name, type, rows, cols)               \
    BENCHMARK_CAPTURE(BM_Matmul, name##_narrow, type, rows, cols) \
        ->ArgsProduct({{1, 2, 3, 4, 5, 8, 12, 16}, {2}})          \
        ->ArgNames({"tokens", "threads"})                         \
        ->UseRealTime()
FERRY_MATMUL_NARROW(q4_1_1536x576, DType::Q4_1, 1536, 576);
// Q8_0 from memory by row length: the short rows (576, 960, 1024) and the long ones pair their row
// groups from different widths (x86_kernels.inc, pair_from_tokens).
FERRY_MATMUL_NARROW(q8_0_49152x576, DType::Q8_0, 49152, 576);
FERRY_MATMUL_NARROW(q8_0_49152x960, DType::Q8_0, 49152, 960);
FERRY_MATMUL_NARROW(q8_0_49152x1024, DType::Q8_0, 49152, 1024);
FERRY_MATMUL_NARROW(q8_0_32768x1536, DType::Q8_0, 32768, 1536);
FERRY_MATMUL_NARROW(q8_0_32768x2048, DType::Q8_0, 32768, 2048);
FERRY_MATMUL_NARROW(q4_0_65536x2048, DType::Q4_0, 65536, 2048);
FERRY_MATMUL_NARROW(q4_k_65536x2048, DType::Q4_K, 65536, 2048);

// One empty parallel region: the wake-up plus barrier a decode step pays per matmul group.
void BM_PoolBarrier(benchmark::State& st) {
    ThreadPool pool(static_cast<int>(st.range(0)));
    for (auto _ : st) pool.run([](int, int) {});
}
BENCHMARK(BM_PoolBarrier)->Arg(1)->Arg(2)->UseRealTime();

void BM_Attend(benchmark::State& st) {
    const int64_t n_kv = st.range(0);
    const int hd = 64;
    const size_t stride = 192;
    std::vector<float> q(hd, 0.1f), k(n_kv * stride, 0.01f), v(n_kv * stride, 0.02f), out(hd);
    for (auto _ : st) {
        kernels::cpu::attend(q.data(), k.data(), v.data(), stride, n_kv, hd, 0.125f, out.data());
        benchmark::DoNotOptimize(out.data());
    }
    st.counters["GFLOP/s"] =
        benchmark::Counter(4.0 * hd * n_kv, benchmark::Counter::kIsIterationInvariantRate,
                           benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Attend)->Arg(128)->Arg(512)->Arg(2048);

// The sampler's masses over a 49,152-token vocabulary (top-p's floor search takes a few).
void BM_SumDouble(benchmark::State& st) {
    std::vector<float> p(49152);
    std::mt19937 rng(3);
    for (auto& v : p) v = static_cast<float>(rng() % 1000) * 2e-8f;
    for (auto _ : st) benchmark::DoNotOptimize(kernels::cpu::sum_double(p.data(), 49152, 1e-6f));
}
BENCHMARK(BM_SumDouble);

void BM_SiluMul(benchmark::State& st) {
    std::vector<float> g(1536, 0.5f), u(1536, 1.0f);
    for (auto _ : st) {
        kernels::cpu::silu_mul(g.data(), u.data(), 1536);
        benchmark::DoNotOptimize(g.data());
    }
}
BENCHMARK(BM_SiluMul);

}  // namespace
