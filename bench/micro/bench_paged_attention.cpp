// Decode attention over the paged KV cache with the default model's shape (9 query heads over
// 3 KV heads of 64, 16-position blocks): one token's attention for one layer, at the
// dispatched level (FERRY_CPU_LEVEL picks it) and with the scalar reference. GB/s counts the
// K and V bytes of the context once (what an ideal kernel reads), so the scalar and per-head
// paths that re-read them show as lower numbers, not higher.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/paged_attention.h"

namespace {
using namespace ferry;

constexpr int kHead = 9, kHeadKv = 3, kHeadDim = 64, kBlock = 16;

struct Context {
    std::vector<float> k, v, q, out;
    std::vector<const float*> kb, vb;
    std::vector<kernels::SeqBlocks> seqs;
    int32_t seq = 0;
    int64_t pos = 0;
};

// One sequence of n_kv positions; its blocks are scattered over a pool twice as large, as in
// the engine, so consecutive blocks are not neighbours in memory.
Context make_context(int64_t n_kv) {
    Context c;
    const size_t stride = kHeadKv * kHeadDim, block_floats = kBlock * stride;
    const int64_t nb = (n_kv + kBlock - 1) / kBlock;
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    c.k.resize(2 * nb * block_floats);
    c.v.resize(2 * nb * block_floats);
    for (auto& x : c.k) x = d(rng);
    for (auto& x : c.v) x = d(rng);
    for (int64_t b = 0; b < nb; ++b) {
        const size_t at = static_cast<size_t>((b * 7919) % (2 * nb)) * block_floats;
        c.kb.push_back(&c.k[at]);
        c.vb.push_back(&c.v[at]);
    }
    c.q.resize(kHead * kHeadDim);
    for (auto& x : c.q) x = d(rng);
    c.out.resize(kHead * kHeadDim);
    c.seqs.push_back({c.kb.data(), c.vb.data()});
    c.pos = n_kv - 1;
    return c;
}

void set_kv_counters(benchmark::State& st, int64_t n_kv) {
    const double bytes = 2.0 * n_kv * kHeadKv * kHeadDim * sizeof(float);
    st.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                             benchmark::Counter::kIs1000);
}

void BM_DecodeAttention(benchmark::State& st) {
    const int64_t n_kv = st.range(0);
    const int threads = static_cast<int>(st.range(1));
    Context c = make_context(n_kv);
    ThreadPool pool(threads);
    const kernels::AttentionBatch b{c.q.data(), c.out.data(), 1,      kHead,
                                    kHeadKv,    kHeadDim,     0.125f, &c.seq,
                                    &c.pos,     c.seqs,       kBlock, kHeadKv * kHeadDim};
    for (auto _ : st) {
        kernels::attend_batch(b, pool);
        benchmark::DoNotOptimize(c.out.data());
    }
    set_kv_counters(st, n_kv);
    st.SetLabel(kernels::cpu_level_name(kernels::cpu_level()));
}
BENCHMARK(BM_DecodeAttention)
    ->ArgsProduct({{512, 2048}, {1, 2}})
    ->ArgNames({"n_kv", "threads"})
    ->UseRealTime();

// The scalar reference, one query head at a time (what decode did before the SIMD kernels).
void BM_DecodeAttentionReference(benchmark::State& st) {
    const int64_t n_kv = st.range(0);
    Context c = make_context(n_kv);
    for (auto _ : st) {
        for (int h = 0; h < kHead; ++h) {
            const kernels::PagedKvView view{c.kb.data(), c.vb.data(), kBlock, kHeadKv * kHeadDim,
                                            static_cast<size_t>(h / (kHead / kHeadKv)) * kHeadDim};
            kernels::attend_paged_reference(&c.q[h * kHeadDim], view, n_kv, kHeadDim, 0.125f,
                                            &c.out[h * kHeadDim]);
        }
        benchmark::DoNotOptimize(c.out.data());
    }
    set_kv_counters(st, n_kv);
}
BENCHMARK(BM_DecodeAttentionReference)->Arg(512)->Arg(2048)->ArgName("n_kv");

}  // namespace
