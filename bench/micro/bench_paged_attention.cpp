// Decode attention over the paged KV cache with the default model's shape (9 query heads over
// 3 KV heads of 64, 16-position blocks): one token's attention for one layer, at the
// dispatched level (FERRY_CPU_LEVEL picks it) for each KV type (f32, f16, int8, fp8), and with
// the scalar reference. GB/s counts the K and V bytes of the context as stored once (what an
// ideal kernel reads), so the scalar and per-head paths that re-read them show as lower
// numbers, not higher. BM_AttendDecodeBatch is a whole decode batch's attention (64 sequences),
// with the caches in memory rather than in cache. BM_DecodeAttentionGqa takes the query heads per
// KV head as an argument (3: the default model; 4: Llama-3.2-1B, Llama-3.1-8B; 8: TinyLlama).
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/paged_attention.h"
#include "kv/kv_store.h"

namespace {
using namespace ferry;

constexpr int kHead = 9, kHeadKv = 3, kHeadDim = 64, kBlock = 16;

// Where the caches live: host memory, as the CPU backend allocates it.
kernels::Backend& backend() {
    static const std::shared_ptr<kernels::Backend> b = kernels::make_backend().value();
    return *b;
}

struct Context {
    std::unique_ptr<kv::KvStore> store;
    std::vector<float> q, out;
    std::vector<const void*> kb, vb;
    std::vector<kernels::cpu::SeqBlocks> seqs;
    int32_t seq = 0;
    int64_t pos = 0;
};

// One sequence of n_kv positions of type t; its blocks are scattered over a pool twice as
// large, as in the engine, so consecutive blocks are not neighbours in memory.
Context make_context(int64_t n_kv, quant::KvDType t = quant::KvDType::F32, int n_head = kHead,
                     int n_head_kv = kHeadKv) {
    Context c;
    const int kv_dim = n_head_kv * kHeadDim;
    const int64_t nb = (n_kv + kBlock - 1) / kBlock;
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    kv::KvFormat f{t, {}};
    if (t == quant::KvDType::Int8) f.k_scales.assign(kv_dim, 1.5f / quant::kInt8Max);
    c.store =
        std::make_unique<kv::KvStore>(backend(), 1, 2 * nb, kBlock, kv_dim, kHeadDim, std::move(f));
    std::vector<float> k(kv_dim), v(kv_dim);
    for (int64_t b = 0; b < nb; ++b) {
        const int64_t at = (b * 7919) % (2 * nb);
        for (int s = 0; s < kBlock; ++s) {
            for (auto& x : k) x = d(rng);
            for (auto& x : v) x = d(rng);
            c.store->write(0, at, s, k.data(), v.data());
        }
        c.kb.push_back(c.store->view().k_block(0, at));
        c.vb.push_back(c.store->view().v_block(0, at));
    }
    c.q.resize(n_head * kHeadDim);
    for (auto& x : c.q) x = d(rng);
    c.out.resize(n_head * kHeadDim);
    c.seqs.push_back({c.kb.data(), c.vb.data()});
    c.pos = n_kv - 1;
    return c;
}

// The context's K and V bytes as stored (scales included), read once.
void set_kv_counters(benchmark::State& st, const Context& c, int64_t n_kv) {
    const double bytes = double(c.store->bytes_per_block()) / kBlock * double(n_kv);
    st.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                             benchmark::Counter::kIs1000);
}

// One decode token's attention for one layer over c, timed, labelled with the level.
void time_decode_attention(benchmark::State& st, Context& c, int64_t n_kv, int threads,
                           quant::KvDType t, int n_head, int n_head_kv) {
    ThreadPool pool(threads);
    const kernels::cpu::AttentionBatch b{c.q.data(), c.out.data(),
                                         1,          n_head,
                                         n_head_kv,  kHeadDim,
                                         0.125f,     &c.seq,
                                         &c.pos,     c.seqs,
                                         kBlock,     c.store->layout(),
                                         t,          c.store->view().k_channel_scales};
    for (auto _ : st) {
        kernels::cpu::attend_batch(b, pool);
        benchmark::DoNotOptimize(c.out.data());
    }
    set_kv_counters(st, c, n_kv);
    st.SetLabel(std::string(kernels::cpu::cpu_level_name(kernels::cpu::cpu_level())) + " " +
                quant::kv_dtype_name(t));
}

// kv: 0 f32, 1 f16, 2 int8, 3 fp8 (quant::KvDType).
void BM_DecodeAttention(benchmark::State& st) {
    const int64_t n_kv = st.range(0);
    const auto t = static_cast<quant::KvDType>(st.range(2));
    Context c = make_context(n_kv, t);
    time_decode_attention(st, c, n_kv, static_cast<int>(st.range(1)), t, kHead, kHeadKv);
}
BENCHMARK(BM_DecodeAttention)
    ->ArgsProduct({{512, 2048}, {1, 2}, {0, 1, 2, 3}})
    ->ArgNames({"n_kv", "threads", "kv"})
    ->UseRealTime();

// f16 KV, 4 KV heads of 64 with `group` query heads each: one decode token, one layer.
void BM_DecodeAttentionGqa(benchmark::State& st) {
    const int64_t n_kv = st.range(0);
    constexpr int n_head_kv = 4;
    const int n_head = n_head_kv * static_cast<int>(st.range(2));
    Context c = make_context(n_kv, quant::KvDType::F16, n_head, n_head_kv);
    time_decode_attention(st, c, n_kv, static_cast<int>(st.range(1)), quant::KvDType::F16, n_head,
                          n_head_kv);
}
BENCHMARK(BM_DecodeAttentionGqa)
    ->ArgsProduct({{512, 2048}, {1, 2}, {3, 4, 8}})
    ->ArgNames({"n_kv", "threads", "group"})
    ->UseRealTime();

// The scalar reference, one query head at a time (what decode did before the SIMD kernels).
void BM_DecodeAttentionReference(benchmark::State& st) {
    const int64_t n_kv = st.range(0);
    Context c = make_context(n_kv);
    for (auto _ : st) {
        for (int h = 0; h < kHead; ++h) {
            const quant::KvBlockLayout l = c.store->layout();
            const kernels::cpu::PagedKvView view{
                c.kb.data(),
                c.vb.data(),
                kBlock,
                l.pos_stride,
                static_cast<size_t>(h / (kHead / kHeadKv)) * l.head_stride,
                l.scale_offset,
                quant::KvDType::F32,
                kHeadKv,
                h / (kHead / kHeadKv)};
            kernels::cpu::attend_paged_reference(&c.q[h * kHeadDim], view, n_kv, kHeadDim, 0.125f,
                                                 &c.out[h * kHeadDim]);
        }
        benchmark::DoNotOptimize(c.out.data());
    }
    set_kv_counters(st, c, n_kv);
}
BENCHMARK(BM_DecodeAttentionReference)->Arg(512)->Arg(2048)->ArgName("n_kv");

// A decode step's attention for one layer: 64 sequences of n_kv positions each (f16 KV,
// 16-slot blocks, the default model's 9 query / 3 KV heads of 64), 2 threads. Each iteration
// takes the next of 30 layers' caches, so, as in the engine, keys and values come from memory
// (64 x 160 positions x 30 layers = 236 MB), not from cache. GB/s: KV bytes read.
void BM_AttendDecodeBatch(benchmark::State& st) {
    const int64_t n_kv = st.range(0);
    constexpr int n_seq = 64, n_layer = 30, bs = kBlock, hd = kHeadDim, n_head = kHead,
                  n_head_kv = kHeadKv;
    const int kv_dim = n_head_kv * hd;
    const int64_t per_seq = (n_kv + bs - 1) / bs;
    kv::KvStore store(backend(), n_layer, n_seq * per_seq, bs, kv_dim, hd,
                      {quant::KvDType::F16, {}});
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    std::vector<float> k(kv_dim), v(kv_dim);
    for (int l = 0; l < n_layer; ++l)
        for (int64_t b = 0; b < store.n_blocks(); ++b)
            for (int sl = 0; sl < bs; ++sl) {
                for (int i = 0; i < kv_dim; ++i) k[i] = nd(rng), v[i] = nd(rng);
                store.write(l, b, sl, k.data(), v.data());
            }
    std::vector<float> q(size_t(n_seq) * n_head * hd), out(q.size());
    for (auto& x : q) x = nd(rng);
    std::vector<int32_t> tok_seq(n_seq);
    std::vector<int64_t> tok_pos(n_seq, n_kv - 1);
    for (int s = 0; s < n_seq; ++s) tok_seq[s] = s;
    // Blocks of a sequence interleaved with the others', as a pool hands them out over time.
    std::vector<std::vector<const void*>> kb(size_t(n_layer) * n_seq), vb(kb.size());
    std::vector<std::vector<kernels::cpu::SeqBlocks>> seqs(n_layer);
    for (int l = 0; l < n_layer; ++l)
        for (int s = 0; s < n_seq; ++s) {
            auto& K = kb[size_t(l) * n_seq + s];
            auto& V = vb[size_t(l) * n_seq + s];
            for (int64_t b = 0; b < per_seq; ++b) {
                K.push_back(store.view().k_block(l, b * n_seq + s));
                V.push_back(store.view().v_block(l, b * n_seq + s));
            }
            seqs[l].push_back({K.data(), V.data()});
        }
    ThreadPool pool(2);
    int l = 0;
    for (auto _ : st) {
        kernels::cpu::attend_batch(
            {q.data(), out.data(), n_seq, n_head, n_head_kv, hd, 0.125f, tok_seq.data(),
             tok_pos.data(), seqs[l], bs, store.layout(), store.dtype(), nullptr},
            pool);
        benchmark::DoNotOptimize(out.data());
        l = (l + 1) % n_layer;
    }
    st.counters["GB/s"] = benchmark::Counter(double(n_seq) * n_kv * 2 * kv_dim * 2,
                                             benchmark::Counter::kIsIterationInvariantRate,
                                             benchmark::Counter::kIs1000);
}
BENCHMARK(BM_AttendDecodeBatch)->Arg(160)->Arg(1024)->UseRealTime();

}  // namespace
