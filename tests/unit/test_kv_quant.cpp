// KV-cache quantization (--kv-dtype): element conversions and their error bounds, the
// KvStore's write / read / copy-on-write with scales, attention over f16 / int8 / fp8 caches
// against f32 on random data with outlier channels, and the default model end to end:
// perplexity and top-1 agreement with f32 KV, and the engine serving with an int8 cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/kv_calibration.h"
#include "engine/model_runner.h"
#include "engine_test_util.h"
#include "kernels/cpu/paged_attention.h"
#include "kv/kv_store.h"
#include "quant/kv_format.h"
#include "test_util.h"

namespace {
using namespace ferry;
using quant::KvDType;

TEST(KvQuant, HalfRoundTripsEveryCodeAndRoundsToNearest) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float f = quant::f16_to_f32(static_cast<uint16_t>(h));
        if (std::isnan(f)) continue;
        ASSERT_EQ(quant::f32_to_f16(f), h) << std::hex << h;
    }
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> d(-60000.0f, 60000.0f);
    for (int i = 0; i < 100000; ++i) {
        const float x = d(rng) * (i % 2 ? 1e-4f : 1.0f);
        const float y = quant::f16_to_f32(quant::f32_to_f16(x));
        // Half an ulp of an 11-bit significand, or half the subnormal step.
        ASSERT_LE(std::fabs(y - x), std::max(std::fabs(x) * 0x1p-11f, 0x1p-25f)) << x;
    }
    EXPECT_TRUE(std::isinf(quant::f16_to_f32(quant::f32_to_f16(70000.0f))));
    EXPECT_TRUE(std::isnan(quant::f16_to_f32(quant::f32_to_f16(NAN))));
}

// The cache's f16 rows (F16C where the CPU has it) equal f32_to_f16 element by element:
// halfway cases, subnormal halves, f32 denormals, the overflow edge, infinities, signed zeros
// and NaN (the canonical one), in every position of an 8-lane group and in the tail.
TEST(KvQuant, HalfRowsEqualTheScalarConversionBitForBit) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
    std::uniform_int_distribution<int> ex(-30, 17);
    std::vector<float> x;
    for (int i = 0; i < 4000; ++i) x.push_back(std::ldexp(mant(rng), ex(rng)));
    const float special[] = {1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 0x1p-24f,  0x1p-25f,
                             0x3p-26f,        0x1p-14f,        0x1p-149f, 65504.0f,
                             65519.99f,       65520.0f,        -0.0f,     0.0f,
                             INFINITY,        -INFINITY,       NAN,       -NAN};
    for (int rep = 0; rep < 3; ++rep)
        for (float f : special) x.insert(x.begin() + rng() % x.size(), f);
    for (int n : {int(x.size()), 7, 8, 9, 15}) {
        std::vector<uint16_t> got(n);
        float scale = 0;
        quant::quantize_kv_row(quant::KvDType::F16, x.data(), n, got.data(), &scale, nullptr);
        for (int i = 0; i < n; ++i) ASSERT_EQ(got[i], quant::f32_to_f16(x[i])) << i << " " << x[i];
    }
}

TEST(KvQuant, E4M3RoundTripsEveryCodeAndSaturates) {
    for (int c = 0; c < 256; ++c) {
        const float f = quant::e4m3_to_f32(static_cast<uint8_t>(c));
        if (std::isnan(f)) continue;
        ASSERT_EQ(quant::f32_to_e4m3(f), c) << c;
    }
    EXPECT_EQ(quant::e4m3_to_f32(0x7e), 448.0f);
    EXPECT_EQ(quant::e4m3_to_f32(quant::f32_to_e4m3(1e6f)), 448.0f);
    EXPECT_EQ(quant::e4m3_to_f32(quant::f32_to_e4m3(-1e6f)), -448.0f);
    EXPECT_EQ(quant::e4m3_to_f32(0x01), 0x1p-9f);  // smallest subnormal
    EXPECT_TRUE(std::isnan(quant::e4m3_to_f32(quant::f32_to_e4m3(NAN))));
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> d(-448.0f, 448.0f);
    for (int i = 0; i < 100000; ++i) {
        const float x = d(rng) * (i % 3 ? 1.0f : 1e-3f);
        const float y = quant::e4m3_to_f32(quant::f32_to_e4m3(x));
        ASSERT_LE(std::fabs(y - x), std::max(std::fabs(x) * 0x1p-4f, 0x1p-10f)) << x;
    }
}

// quantize_kv_row / dequantize_kv_row on a row with an outlier: the error bound of each type.
TEST(KvQuant, RowRoundTripBounds) {
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 1.0f);
    const int n = 64;
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<float> x(n), y(n);
        for (float& e : x) e = d(rng);
        x[trial % n] *= 20.0f;
        float amax = 0;
        for (float e : x) amax = std::max(amax, std::fabs(e));
        std::vector<uint8_t> buf(n * 4);
        for (KvDType t : {KvDType::F16, KvDType::Int8, KvDType::FP8}) {
            float s = 0;
            EXPECT_EQ(quant::quantize_kv_row(t, x.data(), n, buf.data(), &s, nullptr), 0);
            quant::dequantize_kv_row(t, buf.data(), n, s, nullptr, y.data());
            for (int i = 0; i < n; ++i) {
                const float e = std::fabs(y[i] - x[i]);
                // f16: half an ulp of an 11-bit significand; int8: half a step of amax / 127;
                // fp8: half an ulp of a 4-bit significand, or half a subnormal step (s * 2^-10).
                const float bound =
                    t == KvDType::F16 ? std::max(std::fabs(x[i]) * 0x1p-11f, 0x1p-25f)
                    : t == KvDType::Int8
                        ? amax / 254.0f * 1.001f
                        : std::max(std::fabs(x[i]) * 0x1p-4f, s * 0x1p-10f) * 1.001f;
                ASSERT_LE(e, bound) << quant::kv_dtype_name(t);
            }
        }
        // int8 with channel scales: within range, half a step; beyond, clipped and counted.
        std::vector<float> cs(n, amax / 2 / quant::kInt8Max);
        int8_t q[64];
        int64_t beyond = 0;
        for (float e : x) beyond += std::fabs(e) > amax / 2 * (127.5f / 127.0f);
        const int64_t clipped =
            quant::quantize_kv_row(KvDType::Int8, x.data(), n, q, nullptr, cs.data());
        EXPECT_NEAR(static_cast<double>(clipped), static_cast<double>(beyond), 1.0);
        quant::dequantize_kv_row(KvDType::Int8, q, n, 0, cs.data(), y.data());
        for (int i = 0; i < n; ++i) {
            if (std::fabs(x[i]) <= amax / 2) {
                ASSERT_LE(std::fabs(y[i] - x[i]), cs[i] * 0.5001f);
            } else {
                ASSERT_EQ(std::fabs(y[i]), cs[i] * 127.0f);
            }
        }
    }
    // A zero row: zero scale, zeros back (no division by zero).
    std::vector<float> z(n, 0.0f), y(n, 1.0f);
    std::vector<uint8_t> buf(n);
    for (KvDType t : {KvDType::Int8, KvDType::FP8}) {
        float s = -1;
        quant::quantize_kv_row(t, z.data(), n, buf.data(), &s, nullptr);
        EXPECT_EQ(s, 0.0f);
        quant::dequantize_kv_row(t, buf.data(), n, s, nullptr, y.data());
        for (float e : y) EXPECT_EQ(e, 0.0f);
    }
}

kv::KvFormat format_for(KvDType t, int n_layer, int kv_dim, float key_range) {
    kv::KvFormat f;
    f.dtype = t;
    if (t == KvDType::Int8)
        f.k_scales.assign(static_cast<size_t>(n_layer) * kv_dim, key_range / quant::kInt8Max);
    return f;
}

TEST(KvQuant, StoreBytesAndCopyOnWriteCopiesScales) {
    const int n_layer = 2, bs = 16, kv_dim = 192, hd = 64;
    // SmolLM2's shape: int8 is a quarter of f32 plus the values' scales (3 heads x 4 B).
    EXPECT_EQ(kv::KvStore::bytes_per_block(n_layer, bs, kv_dim, hd, KvDType::F32),
              2u * n_layer * bs * kv_dim * 4);
    EXPECT_EQ(kv::KvStore::bytes_per_block(n_layer, bs, kv_dim, hd, KvDType::F16),
              2u * n_layer * bs * kv_dim * 2);
    EXPECT_EQ(kv::KvStore::bytes_per_block(n_layer, bs, kv_dim, hd, KvDType::Int8),
              n_layer * (2u * bs * kv_dim + bs * 3 * 4));
    EXPECT_EQ(kv::KvStore::bytes_per_block(n_layer, bs, kv_dim, hd, KvDType::FP8),
              n_layer * (2u * bs * kv_dim + 2 * bs * 3 * 4));
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> d(-2.0f, 2.0f);
    for (KvDType t : {KvDType::F32, KvDType::F16, KvDType::Int8, KvDType::FP8}) {
        kv::KvStore store(*ferry::testing::cpu_backend(), n_layer, 3, bs, kv_dim, hd,
                          format_for(t, n_layer, kv_dim, 2.0f));
        std::vector<float> k(kv_dim), v(kv_dim), k2(kv_dim), v2(kv_dim), k3(kv_dim), v3(kv_dim);
        for (int l = 0; l < n_layer; ++l)
            for (int s = 0; s < bs; ++s) {
                for (int i = 0; i < kv_dim; ++i) k[i] = d(rng) * (1 + s), v[i] = d(rng) * (1 + s);
                store.write(l, 0, s, k.data(), v.data());
            }
        const std::pair<int32_t, int32_t> cow[] = {{0, 2}};
        store.copy_blocks(cow);
        for (int l = 0; l < n_layer; ++l)
            for (int s = 0; s < bs; ++s) {
                store.read(l, 0, s, k2.data(), v2.data());
                store.read(l, 2, s, k3.data(), v3.data());
                ASSERT_EQ(k2, k3) << quant::kv_dtype_name(t);
                // Rows of different magnitude: equal values mean each row's own scale came too.
                ASSERT_EQ(v2, v3) << quant::kv_dtype_name(t);
                ASSERT_NE(v3[0], 0.0f);
            }
    }
}

// Attention over each quantized cache against the f32 cache, through the KvStore's write
// path and attend_batch, on keys with outlier channels (as real keys have) and GQA 9:3.
TEST(KvQuant, AttentionWithinToleranceOfF32) {
    const int n_head = 9, n_head_kv = 3, hd = 64, bs = 16, kv_dim = n_head_kv * hd;
    const int64_t n_kv = 600;
    std::mt19937 rng(7);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> chan(kv_dim, 1.0f);
    for (int c : {3, 4, 70, 71, 150}) chan[c] = 15.0f;  // outlier channels
    std::vector<float> k(n_kv * kv_dim), v(n_kv * kv_dim), q(n_head * hd);
    for (int64_t p = 0; p < n_kv; ++p)
        for (int c = 0; c < kv_dim; ++c) {
            k[p * kv_dim + c] = d(rng) * chan[c];
            v[p * kv_dim + c] = d(rng) * (p % 50 == 0 ? 8.0f : 1.0f);  // a few loud tokens
        }
    for (float& e : q) e = d(rng) * 0.3f;
    std::vector<float> amax(kv_dim, 0.0f);
    for (int64_t p = 0; p < n_kv; ++p)
        for (int c = 0; c < kv_dim; ++c) amax[c] = std::max(amax[c], std::fabs(k[p * kv_dim + c]));

    const int64_t nb = (n_kv + bs - 1) / bs;
    std::vector<int32_t> table(nb);
    for (int64_t b = 0; b < nb; ++b) table[b] = static_cast<int32_t>(nb - 1 - b);  // scattered
    ThreadPool pool(2);
    auto attend = [&](KvDType t) {
        kv::KvFormat f = format_for(t, 1, kv_dim, 1.0f);
        if (t == KvDType::Int8)
            for (int c = 0; c < kv_dim; ++c) f.k_scales[c] = amax[c] * 1.5f / quant::kInt8Max;
        kv::KvStore store(*ferry::testing::cpu_backend(), 1, nb, bs, kv_dim, hd, std::move(f));
        for (int64_t p = 0; p < n_kv; ++p)
            store.write(0, table[p / bs], static_cast<int>(p % bs), &k[p * kv_dim], &v[p * kv_dim]);
        std::vector<const void*> kb(nb), vb(nb);
        const kernels::KvCacheView view = store.view();
        for (int64_t b = 0; b < nb; ++b)
            kb[b] = view.k_block(0, table[b]), vb[b] = view.v_block(0, table[b]);
        const kernels::cpu::SeqBlocks seq{kb.data(), vb.data()};
        const int32_t tok_seq = 0;
        const int64_t tok_pos = n_kv - 1;
        std::vector<float> out(n_head * hd);
        kernels::cpu::attend_batch({q.data(),
                                    out.data(),
                                    1,
                                    n_head,
                                    n_head_kv,
                                    hd,
                                    0.125f,
                                    &tok_seq,
                                    &tok_pos,
                                    {&seq, 1},
                                    bs,
                                    store.layout(),
                                    t,
                                    view.k_channel_scales},
                                   pool);
        return out;
    };
    const auto want = attend(KvDType::F32);
    float ref_max = 0;
    for (float e : want) ref_max = std::max(ref_max, std::fabs(e));
    // Stated tolerances, as a fraction of the largest output (the outputs are averages of
    // many values, so they are small next to each value's own quantization step): f16 keeps
    // 11 bits; int8 steps are absolute (1/254 of a row's or channel's range); E4M3 keeps 4
    // bits of significand, relative to each element.
    const std::pair<KvDType, float> cases[] = {
        {KvDType::F16, 2e-3f}, {KvDType::Int8, 4e-2f}, {KvDType::FP8, 8e-2f}};
    for (auto [t, tol] : cases) {
        const auto got = attend(t);
        float err = 0;
        for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::fabs(got[i] - want[i]));
        std::printf("[ kv-quant ] attention %-4s max |err| / max |out| = %.2e (tolerance %.0e)\n",
                    quant::kv_dtype_name(t), err / ref_max, tol);
        EXPECT_LE(err / ref_max, tol) << quant::kv_dtype_name(t);
    }
}

// ---- The default model, end to end. ----

// Negative log-likelihood per predicted token and the argmax at each position, over `tokens`
// run in 128-token chunks through a cache of type t.
struct EvalRun {
    std::vector<double> nll;
    std::vector<int32_t> top1;
    int64_t k_clipped = 0;
};

EvalRun evaluate(const engine::LoadedModel& lm, const std::vector<int32_t>& tokens, KvDType t) {
    const auto& m = *lm.model;
    const auto& c = m.config();
    const int bs = 16, chunk = 128;
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t nb = (n + bs - 1) / bs;
    engine::ModelRunner runner(m, lm.backend, nb, bs, engine::kv_format_for(lm, t));
    std::vector<int32_t> table(nb);
    for (int64_t b = 0; b < nb; ++b) table[b] = static_cast<int32_t>(b);
    EvalRun r;
    for (int64_t s = 0; s < n; s += chunk) {
        const int len = static_cast<int>(std::min<int64_t>(chunk, n - s));
        const engine::ModelRunner::Work w{std::span(tokens).subspan(s, len), s, table, len};
        const auto logits = runner.run({&w, 1});
        for (int i = 0; i < len; ++i) {
            const float* row = &logits[static_cast<size_t>(i) * c.n_vocab];
            const int32_t best = static_cast<int32_t>(std::max_element(row, row + c.n_vocab) - row);
            r.top1.push_back(best);
            if (s + i + 1 >= n) continue;
            double z = 0;
            for (int v = 0; v < c.n_vocab; ++v) z += std::exp(double(row[v]) - row[best]);
            r.nll.push_back(std::log(z) + row[best] - row[tokens[s + i + 1]]);
        }
    }
    r.k_clipped = runner.kv().k_clipped();
    return r;
}

TEST(KvQuantModel, PerplexityWithQuantizedKvIsCloseToF32) {
    const auto& lm = ferry::testing::default_model();
    std::ifstream in(ferry::testing::source_dir() + "/data/eval/lighthouse.txt");
    ASSERT_TRUE(in) << "data/eval/lighthouse.txt";
    std::stringstream text;
    text << in.rdbuf();
    auto tokens = lm.tokenizer->encode(text.str(), true, false);
    ASSERT_GE(tokens.size(), 512u);
    tokens.resize(512);
    auto ppl = [](const EvalRun& r) {
        double s = 0;
        for (double e : r.nll) s += e;
        return std::exp(s / static_cast<double>(r.nll.size()));
    };
    const EvalRun base = evaluate(lm, tokens, KvDType::F32);
    const double p0 = ppl(base);
    std::printf("[ kv-quant ] lighthouse.txt, 512 tokens: f32 KV ppl %.4f\n", p0);
    for (KvDType t : {KvDType::F16, KvDType::Int8, KvDType::FP8}) {
        const EvalRun r = evaluate(lm, tokens, t);
        int agree = 0;
        for (size_t i = 0; i < r.top1.size(); ++i) agree += r.top1[i] == base.top1[i];
        const double p = ppl(r), delta = (p - p0) / p0;
        std::printf(
            "[ kv-quant ] %-4s KV ppl %.4f (%+.3f %%), top-1 agreement with f32 %.1f %%, "
            "int8 keys clipped %lld\n",
            quant::kv_dtype_name(t), p, 100 * delta, 100.0 * agree / double(r.top1.size()),
            static_cast<long long>(r.k_clipped));
        // int8: the target, a perplexity at most 0.5 % above f32's; fp8 is reported,
        // with a loose guard. On 512 tokens int8's rounding moves PPL by a few tenths of a
        // percent either way (-0.36 %, and -0.53 % after the MLP's silu went from the scalar to
        // the vector exp), so a drop is allowed twice the room: it is noise, not damage, while
        // a broken cache would show as a rise.
        const double limit = t == KvDType::Int8 ? 0.005 : t == KvDType::F16 ? 0.001 : 0.05;
        EXPECT_LE(delta, limit) << quant::kv_dtype_name(t);
        EXPECT_GE(delta, -2 * limit) << quant::kv_dtype_name(t);
    }
}

// The engine with an int8 cache: about 4x the blocks of f32 in the same memory, batching
// still invisible (quantization is per token, attention batch-invariant), and its greedy
// output for a few prompts printed next to f32's.
TEST(KvQuantModel, EngineServesWithInt8Kv) {
    namespace ft = ferry::testing;
    auto cfg = ft::small_config();
    cfg.kv_cache_memory = 32ll << 20;
    auto f32_engine = ft::make_engine(cfg);
    engine::Engine& f32 = *f32_engine;
    cfg.kv_dtype = KvDType::Int8;
    auto i8_engine = ft::make_engine(cfg);
    engine::Engine& i8 = *i8_engine;
    const double ratio = double(i8.kv_blocks()) / double(f32.kv_blocks());
    std::printf("[ kv-quant ] 32 MiB pool: %lld f32 blocks, %lld int8 blocks (%.2fx)\n",
                static_cast<long long>(f32.kv_blocks()), static_cast<long long>(i8.kv_blocks()),
                ratio);
    EXPECT_GT(ratio, 3.8);

    const char* texts[] = {"The capital of France is", "Once upon a time there was a little",
                           "def fibonacci(n):", "The three primary colors are"};
    std::vector<std::vector<int32_t>> prompts;
    for (const char* s : texts) prompts.push_back(ft::model().tokenizer->encode(s, true, false));
    std::vector<engine::RequestParams> params(prompts.size(), ft::greedy(16));
    auto want = ft::run_all(f32, prompts, params);
    auto got = ft::run_all(i8, prompts, params);
    ft::expect_all_free(i8);
    for (size_t i = 0; i < prompts.size(); ++i) {
        std::printf("[ kv-quant ] f32 : %s|%s\n[ kv-quant ] int8: %s|%s\n", texts[i],
                    want[i].text[0].c_str(), texts[i], got[i].text[0].c_str());
        // Each request alone gives what it got in the batch.
        auto alone_engine = ft::make_engine(cfg);
        engine::Engine& alone = *alone_engine;
        auto single = ft::run_all(alone, {prompts[i]}, {params[i]});
        EXPECT_EQ(single[0].tokens[0], got[i].tokens[0]) << texts[i];
    }
}

}  // namespace
