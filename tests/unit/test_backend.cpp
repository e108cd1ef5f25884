// The backend interface (kernels/backend.h) against plain math written here, op by op: what a
// backend must do for the model to be right on it. Every backend this build has runs it; the
// CPU backend once per SIMD level (scalar, AVX2, AVX-512, NEON), so each level's paths and the
// interface glue around them (row loops, batches, block tables, the KV write) are checked
// against the same independent references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "engine/sampler.h"
#include "kernel_levels.h"
#include "kernels/backend.h"
#include "kernels/cpu/dispatch.h"
#include "kv/kv_store.h"
#include "quant/dequantize.h"
#include "quant/kv_format.h"
#include "quant/quantize.h"

namespace {
using namespace ferry;
using kernels::Backend;
using kernels::cpu::CpuLevel;

// One backend to test: the CPU's at one SIMD level, or (in a -DFERRY_CUDA=ON build) the GPU's.
struct Param {
    CpuLevel level;
    Device device = Device::CPU;
};
std::string param_name(const ::testing::TestParamInfo<Param>& i) {
    if (i.param.device == Device::CUDA) return "cuda";
    return kernels::cpu::cpu_level_name(i.param.level);
}
void PrintTo(const Param& p, std::ostream* os) {
    *os << (p.device == Device::CUDA ? "cuda" : kernels::cpu::cpu_level_name(p.level));
}
std::vector<Param> params() {
    std::vector<Param> out;
    for (CpuLevel l : ferry::testing::simd_levels(true)) out.push_back({l});
#ifdef FERRY_CUDA
    out.push_back({kernels::cpu::cpu_level(), Device::CUDA});
#endif
    return out;
}

class BackendOps : public ::testing::TestWithParam<Param> {
  protected:
    void SetUp() override {
        kernels::cpu::set_cpu_level(GetParam().level);
        auto b = kernels::make_backend(
            {.device = GetParam().device, .threads = 2, .activations = kernels::Activations::F32});
        // A CUDA build runs its GPU cases only where a GPU is (FERRY_REQUIRE_CUDA: the GPU
        // machine's check, where a skip would hide a missing driver).
        if (!b.ok() && GetParam().device == Device::CUDA && !std::getenv("FERRY_REQUIRE_CUDA"))
            GTEST_SKIP() << b.error().message;
        ASSERT_TRUE(b.ok()) << b.error().message;
        be = std::move(*b);
    }
    void TearDown() override { kernels::cpu::set_cpu_level(guard.saved); }

    // A device tensor holding `host`, shaped {rows, cols}.
    Tensor put(const std::vector<float>& host, int64_t rows, int64_t cols) {
        const int64_t shape[] = {rows, cols};
        Tensor t = be->alloc(DType::F32, shape);
        be->upload(host.data(), t);
        return t;
    }
    std::vector<float> get(const Tensor& t) {
        std::vector<float> out(static_cast<size_t>(t.numel()));
        be->download(t, out.data());
        return out;
    }

    ferry::testing::LevelGuard guard;
    std::shared_ptr<Backend> be;
    std::mt19937 rng{11};
    std::vector<float> random(size_t n, float scale = 1.0f) {
        std::normal_distribution<float> d(0.0f, scale);
        std::vector<float> v(n);
        for (float& x : v) x = d(rng);
        return v;
    }
};

void expect_near(const std::vector<float>& got, const std::vector<double>& want, double tol,
                 const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " at " << i;
}

TEST_P(BackendOps, MemoryIsZeroedCopiedAndRoundTripped) {
    const int64_t shape[] = {3, 40};
    Tensor a = be->alloc(DType::F32, shape), b = be->alloc(DType::F32, shape);
    EXPECT_TRUE(a.owning());
    EXPECT_EQ(a.device(), be->device());
    for (float x : get(a)) ASSERT_EQ(x, 0.0f);
    const auto v = random(120);
    be->upload(v.data(), a);
    EXPECT_EQ(get(a), v);
    const Backend::Copy c{static_cast<const std::byte*>(a.slice(1, 1).raw()),
                          static_cast<std::byte*>(b.slice(2, 1).raw()), a.row_bytes()};
    be->copy({&c, 1});
    const auto got = get(b);
    for (int i = 0; i < 40; ++i) ASSERT_EQ(got[80 + i], v[40 + i]);
    for (int i = 0; i < 80; ++i) ASSERT_EQ(got[i], 0.0f);
    // Scratch keeps the largest size asked of a slot and hands out the shape asked now.
    Tensor s = be->scratch(3, DType::F32, {4, 10});
    EXPECT_EQ(s.rows(), 4);
    EXPECT_EQ(s.cols(), 10);
    Tensor s2 = be->scratch(3, DType::F32, {2, 10});
    EXPECT_EQ(s2.raw(), s.raw());
    const Tensor h = be->host_view(a);
    EXPECT_EQ(std::vector<float>(h.data<float>(), h.data<float>() + 120), v);
}

TEST_P(BackendOps, ElementwiseOpsMatchPlainMath) {
    const int64_t n = 9, dim = 67;  // odd sizes: vector bodies and tails
    const auto x = random(n * dim), w = random(dim), y = random(n * dim), bias = random(dim);
    // rmsnorm
    {
        Tensor tx = put(x, n, dim), tout = put(std::vector<float>(n * dim), n, dim);
        Tensor tw = put(w, 1, dim).reshape({dim});
        be->rmsnorm(tx, tw, 1e-5f, tout);
        std::vector<double> want(n * dim);
        for (int64_t t = 0; t < n; ++t) {
            double ss = 0;
            for (int64_t i = 0; i < dim; ++i) ss += double(x[t * dim + i]) * x[t * dim + i];
            const double r = 1.0 / std::sqrt(ss / dim + 1e-5);
            for (int64_t i = 0; i < dim; ++i) want[t * dim + i] = x[t * dim + i] * r * w[i];
        }
        expect_near(get(tout), want, 1e-5, "rmsnorm");
    }
    // add, add_bias
    {
        Tensor tx = put(x, n, dim), ty = put(y, n, dim), tb = put(bias, 1, dim).reshape({dim});
        be->add(tx, ty);
        be->add_bias(tx, tb);
        std::vector<double> want(n * dim);
        for (int64_t i = 0; i < n * dim; ++i) want[i] = double(x[i]) + y[i] + bias[i % dim];
        expect_near(get(tx), want, 1e-6, "add + bias");
    }
    // silu_mul
    {
        Tensor tg = put(x, n, dim), tu = put(y, n, dim);
        be->silu_mul(tg, tu);
        std::vector<double> want(n * dim);
        for (int64_t i = 0; i < n * dim; ++i)
            want[i] = double(x[i]) / (1.0 + std::exp(-double(x[i]))) * y[i];
        expect_near(get(tg), want, 1e-5, "silu_mul");
    }
    // gelu_mul against GELU's tanh form in doubles; scale; softcap
    {
        Tensor tg = put(x, n, dim), tu = put(y, n, dim);
        be->gelu_mul(tg, tu);
        std::vector<double> want(n * dim);
        for (int64_t i = 0; i < n * dim; ++i) {
            const double v = x[i];
            const double u = std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
            want[i] = 0.5 * v * (1.0 + std::tanh(u)) * y[i];
        }
        expect_near(get(tg), want, 1e-5, "gelu_mul");
        Tensor ts = put(x, n, dim);
        be->scale(ts, 3.5f);
        for (int64_t i = 0; i < n * dim; ++i) want[i] = 3.5 * x[i];
        expect_near(get(ts), want, 1e-6, "scale");
        Tensor tc = put(x, n, dim);
        be->softcap(tc, 0.75f);
        for (int64_t i = 0; i < n * dim; ++i) want[i] = 0.75 * std::tanh(x[i] / 0.75);
        expect_near(get(tc), want, 1e-6, "softcap");
    }
    // gather_rows, add_rows_scaled (a mixture's experts), softmax, argmax
    {
        Tensor tx = put(x, n, dim), out = put(std::vector<float>(3 * dim), 3, dim);
        const int32_t rows[] = {7, 0, 7};
        be->gather_rows(tx, rows, out);
        const auto g = get(out);
        for (int r = 0; r < 3; ++r)
            for (int64_t i = 0; i < dim; ++i) ASSERT_EQ(g[r * dim + i], x[rows[r] * dim + i]);
        // Row 7 takes two of the rows, in order; row 0 one; the others none.
        Tensor acc = put(y, n, dim);
        const float weight[] = {0.5f, -2.0f, 1.25f};
        be->add_rows_scaled(acc, rows, weight, out);
        std::vector<double> want(y.begin(), y.end());
        for (int r = 0; r < 3; ++r)
            for (int64_t i = 0; i < dim; ++i)
                want[rows[r] * dim + i] += double(weight[r]) * g[r * dim + i];
        expect_near(get(acc), want, 1e-6, "add_rows_scaled");
        std::vector<int32_t> best(n);
        be->argmax(tx, best);
        be->softmax(tx);
        const auto p = get(tx);
        for (int64_t t = 0; t < n; ++t) {
            const float* row = &x[t * dim];
            EXPECT_EQ(best[t], std::max_element(row, row + dim) - row);
            double z = 0, mx = *std::max_element(row, row + dim);
            for (int64_t i = 0; i < dim; ++i) z += std::exp(double(row[i]) - mx);
            for (int64_t i = 0; i < dim; ++i)
                ASSERT_NEAR(p[t * dim + i], std::exp(double(row[i]) - mx) / z, 1e-6);
        }
    }
}

// The rotation of a batch's positions, both pair styles, against the angles computed here.
TEST_P(BackendOps, RopeRotatesByEachTokensPosition) {
    const int n_heads = 3, hd = 16, rope_dim = 12;  // a partial rotation leaves dims 12..15
    const int64_t positions[] = {0, 5, 4095};
    const int32_t tokens[] = {1, 2, 3}, token_seq[] = {0, 0, 0};
    const kernels::BatchSeq seq{0, 3, 0, {}};
    const kernels::Batch b{tokens, positions, token_seq, {&seq, 1}, {}};
    for (auto style : {kernels::RopeStyle::Normal, kernels::RopeStyle::Neox}) {
        const auto x = random(3 * n_heads * hd);
        Tensor tx = put(x, 3, n_heads * hd),
               cs = put(std::vector<float>(3 * rope_dim), 3, rope_dim);
        // Frequencies of a scaled model (each its own divisor), as the model hands them over.
        std::vector<double> inv(rope_dim / 2);
        for (int i = 0; i < rope_dim / 2; ++i)
            inv[size_t(i)] = std::pow(10000.0, -2.0 * i / rope_dim) / (1.0 + 0.5 * i);
        be->rope_angles(b, inv, 0.75f, cs);  // YaRN's attention factor scales both
        be->rope(tx, n_heads, hd, rope_dim, cs, style);
        std::vector<double> want(x.begin(), x.end());
        for (int t = 0; t < 3; ++t)
            for (int h = 0; h < n_heads; ++h)
                for (int i = 0; i < rope_dim / 2; ++i) {
                    const double th = double(positions[t]) *
                                      std::pow(10000.0, -2.0 * i / rope_dim) / (1.0 + 0.5 * i);
                    const int a = style == kernels::RopeStyle::Normal ? 2 * i : i;
                    const int c =
                        style == kernels::RopeStyle::Normal ? 2 * i + 1 : i + rope_dim / 2;
                    const size_t o = (size_t(t) * n_heads + h) * hd;
                    const double co = 0.75 * std::cos(th), si = 0.75 * std::sin(th);
                    want[o + a] = x[o + a] * co - x[o + c] * si;
                    want[o + c] = x[o + a] * si + x[o + c] * co;
                }
        expect_near(get(tx), want, 1e-4, "rope");
    }
}

// Weights made resident (packed, copied or left as rows) multiply and embed as the
// dequantized file rows say.
TEST_P(BackendOps, ResidentMatricesMultiplyAndEmbedAsTheirRows) {
    const int64_t rows = 40, cols = 256;
    // 5 tokens take a decode product's path, 12 a prefill's (the GPU's tiles).
    for (const int64_t n : {5, 12})
        for (DType type :
             {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
              DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::INT8,
              DType::FP8, DType::INT4_G64, DType::INT3_G32}) {
            const auto w = random(rows * cols, 0.05f);
            // Row by row: ferry's per-row types keep a scale in each row's header.
            std::vector<uint8_t> qb;
            std::vector<float> deq(rows * cols);
            const size_t rb = row_bytes(type, cols);
            for (int64_t r = 0; r < rows; ++r) {
                auto q = quant::quantize(type, w.data() + r * cols, cols);
                ASSERT_TRUE(q.ok() && q->size() == rb) << dtype_name(type);
                ASSERT_TRUE(
                    quant::dequantize_row(type, q->data(), deq.data() + r * cols, cols).ok());
                qb.insert(qb.end(), q->begin(), q->end());
            }
            const Tensor host(qb.data(), type, {rows, cols});
            const kernels::MatrixSource src[] = {{host, kernels::MatrixUse::Matmul},
                                                 {host, kernels::MatrixUse::Rows}};
            const auto m = be->make_resident(src);
            ASSERT_EQ(m.size(), 2u);
            EXPECT_EQ(m[0].rows(), rows);
            EXPECT_EQ(m[0].cols(), cols);
            if (be->device() == Device::CPU) {
                EXPECT_EQ(be->bytes_read(m[0]), host.bytes());  // f32 activations read the rows
            } else {
                // The GPU keeps the file's own blocks: a multiplication streams the file's bytes.
                EXPECT_EQ(be->bytes_read(m[0]), host.bytes()) << dtype_name(type);
                EXPECT_EQ(m[0].type(), type);
            }
            const auto x = random(n * cols);
            Tensor tx = put(x, n, cols), ty = put(std::vector<float>(n * rows), n, rows);
            const kernels::MatmulOut out[] = {{&m[0], ty}};
            be->matmul(out, tx);
            std::vector<double> want(n * rows);
            for (int64_t t = 0; t < n; ++t)
                for (int64_t r = 0; r < rows; ++r) {
                    double s = 0;
                    for (int64_t c = 0; c < cols; ++c)
                        s += double(deq[r * cols + c]) * x[t * cols + c];
                    want[t * rows + r] = s;
                }
            expect_near(get(ty), want, 2e-4,
                        fmt::format("{} x {} tokens", dtype_name(type), n).c_str());

            const int32_t tokens[] = {39, 0, 17}, token_seq[] = {0, 0, 0};
            const int64_t positions[] = {0, 1, 2};
            const kernels::BatchSeq seq{0, 3, 0, {}};
            const kernels::Batch b{tokens, positions, token_seq, {&seq, 1}, {}};
            Tensor te = put(std::vector<float>(3 * cols), 3, cols);
            be->embed(m[1], b, te);
            const auto e = get(te);
            for (int t = 0; t < 3; ++t)
                for (int64_t c = 0; c < cols; ++c)
                    ASSERT_EQ(e[t * cols + c], deq[tokens[t] * cols + c]) << dtype_name(type);
        }
}

// A resident vector (a norm, a bias) is the backend's own copy: the file's pages it came from
// can be released (and, on the CPU, must not be read again: a fault there maps a whole folio of
// released matrix pages back).
TEST_P(BackendOps, ResidentVectorsAreTheirOwnCopies) {
    std::vector<float> host = random(96, 1.0f);
    const std::vector<float> want = host;
    const Tensor v = be->resident_vector(Tensor(host.data(), DType::F32, {96}));
    EXPECT_NE(v.raw(), static_cast<void*>(host.data()));
    EXPECT_TRUE(v.owning());
    std::fill(host.begin(), host.end(), -1.0f);
    EXPECT_EQ(get(v), want);
}

// A ragged batch of two sequences over scattered blocks: the KV write puts every token where
// its block table says, and causal attention over the cache equals softmax(q.K) V computed here
// in double, for GQA 4:2 and every cache type: f32, f16, int8 (calibrated key channels, value
// rows scaled per token) and fp8, each row stored as the CPU's reference stores it.
TEST_P(BackendOps, KvWriteAndAttentionFollowTheBlockTables) {
    const int n_head = 4, n_head_kv = 2, hd = 32, bs = 4, kv_dim = n_head_kv * hd;
    // Sequence 0: 6 cached positions + 3 new tokens; sequence 1: 2 new tokens from empty.
    const int32_t blocks0[] = {5, 2, 7}, blocks1[] = {0};
    const int64_t start[] = {6, 0};
    const int32_t len[] = {3, 2};
    for (quant::KvDType dt :
         {quant::KvDType::F32, quant::KvDType::F16, quant::KvDType::Int8, quant::KvDType::FP8}) {
        std::vector<float> channel;  // int8 keys: one calibrated scale per channel
        if (dt == quant::KvDType::Int8)
            for (int i = 0; i < kv_dim; ++i) channel.push_back(0.02f + 0.001f * float(i % 7));
        kv::KvStore store(*be, 1, 8, bs, kv_dim, hd, {dt, channel});
        // Every position's keys and values; the cached ones written as earlier steps would.
        const auto k0 = random(9 * kv_dim), v0 = random(9 * kv_dim);
        const auto k1 = random(2 * kv_dim), v1 = random(2 * kv_dim);
        for (int p = 0; p < 6; ++p)
            store.write(0, blocks0[p / bs], p % bs, &k0[p * kv_dim], &v0[p * kv_dim]);
        const int32_t tokens[] = {1, 2, 3, 4, 5}, token_seq[] = {0, 0, 0, 1, 1};
        const int64_t positions[] = {6, 7, 8, 0, 1};
        const kernels::BatchSeq seqs[] = {{start[0], len[0], 0, blocks0},
                                          {start[1], len[1], 3, blocks1}};
        const kernels::Batch b{tokens, positions, token_seq, seqs, {}};
        std::vector<float> k(5 * kv_dim), v(5 * kv_dim);
        std::copy(k0.begin() + 6 * kv_dim, k0.end(), k.begin());
        std::copy(v0.begin() + 6 * kv_dim, v0.end(), v.begin());
        std::copy(k1.begin(), k1.end(), k.begin() + 3 * kv_dim);
        std::copy(v1.begin(), v1.end(), v.begin() + 3 * kv_dim);
        be->kv_write(store.view(), 0, b, put(k, 5, kv_dim), put(v, 5, kv_dim));

        // What the cache holds: each (position, KV head) row as the reference stores and reads
        // it back (a row's scale comes from the whole row, so this goes row by row).
        int64_t clipped = 0;  // int8 key codes beyond 127 steps of their channel, as counted
        auto stored = [&](const std::vector<float>& x, bool key) {
            std::vector<float> out(x.size());
            std::vector<uint8_t> code(size_t(hd) * 4);
            for (size_t r = 0; r < x.size() / hd; ++r) {
                const float* cs =
                    key && !channel.empty() ? &channel[(r % n_head_kv) * hd] : nullptr;
                float sc = 0;
                clipped += quant::quantize_kv_row(dt, &x[r * hd], hd, code.data(), &sc, cs);
                quant::dequantize_kv_row(dt, code.data(), hd, sc, cs, &out[r * hd]);
            }
            return out;
        };
        const auto K0 = stored(k0, true), V0 = stored(v0, false);
        const auto K1 = stored(k1, true), V1 = stored(v1, false);
        // Every key row went through kv_write (the cached ones by store.write), and each
        // backend counts what it clipped where the store reads it.
        if (dt == quant::KvDType::Int8) {
            EXPECT_GT(clipped, 0);
        }
        EXPECT_EQ(store.k_clipped(), clipped) << quant::kv_dtype_name(dt);
        std::vector<float> rk(kv_dim), rv(kv_dim);
        for (int p = 0; p < 9; ++p) {
            store.read(0, blocks0[p / bs], p % bs, rk.data(), rv.data());
            for (int i = 0; i < kv_dim; ++i) {
                ASSERT_EQ(rk[i], K0[p * kv_dim + i]) << quant::kv_dtype_name(dt) << " " << p;
                ASSERT_EQ(rv[i], V0[p * kv_dim + i]) << quant::kv_dtype_name(dt) << " " << p;
            }
        }

        const auto q = random(5 * n_head * hd);
        Tensor tq = put(q, 5, n_head * hd),
               tout = put(std::vector<float>(q.size()), 5, n_head * hd);
        const float scale = 1.0f / std::sqrt(float(hd));
        be->attention(store.view(), 0, b, {n_head, n_head_kv, hd, scale}, tq, tout);
        std::vector<double> want(q.size());
        for (int t = 0; t < 5; ++t) {
            const bool s0 = token_seq[t] == 0;
            const float* K = s0 ? K0.data() : K1.data();
            const float* V = s0 ? V0.data() : V1.data();
            for (int h = 0; h < n_head; ++h) {
                const int g = h / (n_head / n_head_kv);
                const float* qh = &q[(size_t(t) * n_head + h) * hd];
                std::vector<double> sc(positions[t] + 1);
                double mx = -1e300;
                for (int64_t p = 0; p <= positions[t]; ++p) {
                    double s = 0;
                    for (int d = 0; d < hd; ++d) s += double(qh[d]) * K[p * kv_dim + g * hd + d];
                    sc[p] = s * scale;
                    mx = std::max(mx, sc[p]);
                }
                double z = 0;
                for (double& s : sc) z += (s = std::exp(s - mx));
                for (int d = 0; d < hd; ++d) {
                    double o = 0;
                    for (int64_t p = 0; p <= positions[t]; ++p)
                        o += sc[p] / z * V[p * kv_dim + g * hd + d];
                    want[(size_t(t) * n_head + h) * hd + d] = o;
                }
            }
        }
        expect_near(get(tout), want, 1e-4, quant::kv_dtype_name(dt));
    }
}

// Decode over a long context, GQA 4:2: what a GPU splits across its multiprocessors
// (flash-decoding, shares merged after) must equal one softmax over the whole span, computed here
// in double; beside it in the same batch a 3-position sequence, whose later shares are empty;
// and again with a sliding window that starts mid-block.
TEST_P(BackendOps, LongContextAttentionEqualsOneSoftmax) {
    const int n_head = 4, n_head_kv = 2, hd = 64, bs = 16, kv_dim = n_head_kv * hd;
    const int64_t n_ctx[] = {1500, 3};
    const int n_blocks = static_cast<int>((n_ctx[0] + bs - 1) / bs);
    kv::KvStore store(*be, 1, n_blocks + 3, bs, kv_dim, hd, {quant::KvDType::F32, {}});
    std::vector<int32_t> blocks0(n_blocks);
    for (int i = 0; i < n_blocks; ++i) blocks0[i] = (i * 7 + 3) % (n_blocks + 2);  // scattered
    const std::vector<int32_t> blocks1 = {n_blocks + 2};
    const std::vector<int32_t>* tables[] = {&blocks0, &blocks1};
    std::vector<float> k[2], v[2];
    for (int s = 0; s < 2; ++s) {
        k[s] = random(n_ctx[s] * kv_dim), v[s] = random(n_ctx[s] * kv_dim);
        for (int64_t p = 0; p < n_ctx[s]; ++p)
            store.write(0, (*tables[s])[p / bs], p % bs, &k[s][p * kv_dim], &v[s][p * kv_dim]);
    }
    const auto q = random(2 * n_head * hd, 0.3f);
    const float scale = 1.0f / std::sqrt(float(hd));
    for (const int window : {0, 701}) {
        const int32_t tokens[] = {1, 2}, token_seq[] = {0, 1};
        const int64_t positions[] = {n_ctx[0] - 1, n_ctx[1] - 1};
        const kernels::BatchSeq seqs[] = {{n_ctx[0] - 1, 1, 0, blocks0},
                                          {n_ctx[1] - 1, 1, 1, blocks1}};
        const kernels::Batch b{tokens, positions, token_seq, seqs, {}};
        Tensor tq = put(q, 2, n_head * hd),
               tout = put(std::vector<float>(q.size()), 2, n_head * hd);
        kernels::AttentionShape shape{n_head, n_head_kv, hd, scale};
        shape.window = window;
        be->attention(store.view(), 0, b, shape, tq, tout);
        std::vector<double> want(q.size());
        for (int t = 0; t < 2; ++t) {
            const int64_t first = window > 0 ? std::max<int64_t>(0, n_ctx[t] - window) : 0;
            for (int h = 0; h < n_head; ++h) {
                const int g = h / (n_head / n_head_kv);
                const float* qh = &q[(size_t(t) * n_head + h) * hd];
                std::vector<double> sc;
                double mx = -1e300;
                for (int64_t p = first; p < n_ctx[t]; ++p) {
                    double s = 0;
                    for (int d = 0; d < hd; ++d) s += double(qh[d]) * k[t][p * kv_dim + g * hd + d];
                    sc.push_back(s * scale);
                    mx = std::max(mx, sc.back());
                }
                double z = 0;
                for (double& s : sc) z += (s = std::exp(s - mx));
                for (int d = 0; d < hd; ++d) {
                    double o = 0;
                    for (int64_t p = first; p < n_ctx[t]; ++p)
                        o += sc[size_t(p - first)] / z * v[t][p * kv_dim + g * hd + d];
                    want[(size_t(t) * n_head + h) * hd + d] = o;
                }
            }
        }
        expect_near(get(tout), want, 1e-4, window ? "window 701" : "whole context");
    }
}

// A verified draft's slots moving down carry their rows and per-token scales, every layer; and
// turning a block's keys (KV eviction's re-rotation) leaves each row as the reference's rotate
// and store would, fp8 with a fresh scale. Every cache type; int8 keys refuse to turn.
TEST_P(BackendOps, KvSlotMovesAndKeyRotationsKeepRowsAndScales) {
    const int n_layer = 2, n_head_kv = 2, hd = 16, bs = 4, kv_dim = n_head_kv * hd;
    const int32_t blocks[] = {3, 1};
    for (quant::KvDType dt :
         {quant::KvDType::F32, quant::KvDType::F16, quant::KvDType::Int8, quant::KvDType::FP8}) {
        const char* name = quant::kv_dtype_name(dt);
        std::vector<float> channel;
        if (dt == quant::KvDType::Int8) channel.assign(size_t(n_layer) * kv_dim, 0.03f);
        kv::KvStore store(*be, n_layer, 4, bs, kv_dim, hd, {dt, channel});
        // Rows of very different sizes, so a scale left behind would show.
        std::vector<std::vector<float>> k(8), v(8);
        for (int p = 0; p < 8; ++p) {
            k[p] = random(kv_dim, 0.2f * float(p + 1)), v[p] = random(kv_dim, 0.3f * float(8 - p));
            for (int l = 0; l < n_layer; ++l)
                store.write(l, blocks[p / bs], p % bs, k[p].data(), v[p].data());
        }
        auto read = [&](int l, int p) {
            std::vector<float> rk(kv_dim), rv(kv_dim);
            store.read(l, blocks[p / bs], p % bs, rk.data(), rv.data());
            return std::pair{rk, rv};
        };
        std::vector<std::pair<std::vector<float>, std::vector<float>>> before;
        for (int p = 0; p < 8; ++p) before.push_back(read(1, p));
        // Positions 5 and 7 move to 2 and 3, in that order (the second reads what is still its).
        const std::pair<int64_t, int64_t> moves[] = {{5, 2}, {7, 3}};
        const kernels::BatchSeq seq{0, 8, 0, blocks};
        be->kv_move_slots(store.view(), seq, moves);
        for (int l = 0; l < n_layer; ++l) {
            EXPECT_EQ(read(l, 2), before[5]) << name << " layer " << l;
            EXPECT_EQ(read(l, 3), before[7]) << name << " layer " << l;
            EXPECT_EQ(read(l, 6), before[6]) << name << " layer " << l;  // untouched
        }

        const int rope_dim = hd;
        std::vector<float> cs(rope_dim);
        for (int i = 0; i < rope_dim / 2; ++i)
            cs[2 * i] = std::cos(0.3f * float(i + 1)),
                   cs[2 * i + 1] = std::sin(0.3f * float(i + 1));
        if (dt == quant::KvDType::Int8) {
            EXPECT_THROW(be->kv_rotate_keys(store.view(), 0, blocks[1], rope_dim, cs,
                                            kernels::RopeStyle::Normal),
                         std::invalid_argument);
            continue;
        }
        std::vector<std::vector<float>> keys(bs);
        for (int slot = 0; slot < bs; ++slot) keys[slot] = read(0, bs + slot).first;
        be->kv_rotate_keys(store.view(), 0, blocks[1], rope_dim, cs, kernels::RopeStyle::Normal);
        for (int slot = 0; slot < bs; ++slot) {
            const auto got = read(0, bs + slot).first;
            for (int h = 0; h < n_head_kv; ++h) {
                // The reference: the row as read, turned pair by pair, stored and read again.
                std::vector<float> row(keys[slot].begin() + h * hd,
                                       keys[slot].begin() + (h + 1) * hd);
                for (int i = 0; i < rope_dim / 2; ++i) {
                    const float x0 = row[2 * i], x1 = row[2 * i + 1];
                    row[2 * i] = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
                    row[2 * i + 1] = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
                }
                std::vector<uint8_t> code(size_t(hd) * 4);
                std::vector<float> want(hd);
                float sc = 0;
                quant::quantize_kv_row(dt, row.data(), hd, code.data(), &sc, nullptr);
                quant::dequantize_kv_row(dt, code.data(), hd, sc, nullptr, want.data());
                for (int d = 0; d < hd; ++d) {
                    // Float rounding in the turn (a GPU fuses it into FMAs) may move a code by
                    // one step: 1/8 of the value for fp8, one ulp for f16.
                    const float tol = dt == quant::KvDType::FP8 ? 0.13f * std::fabs(want[d]) + 1e-6f
                                      : dt == quant::KvDType::F16
                                          ? 1e-3f * std::fabs(want[d]) + 1e-5f
                                          : 1e-5f;
                    ASSERT_NEAR(got[h * hd + d], want[d], tol) << name << " slot " << slot;
                }
            }
        }
    }
}

// A cache type the backend cannot keep is refused when the store is made, with its reason;
// the CPU keeps every type.
TEST_P(BackendOps, KvStoreRefusesTheCacheTypesTheBackendCannotKeep) {
    for (quant::KvDType dt :
         {quant::KvDType::F32, quant::KvDType::F16, quant::KvDType::Int8, quant::KvDType::FP8}) {
        const Status ok = be->kv_support(dt);
        if (be->device() == Device::CPU) {
            EXPECT_TRUE(ok.ok()) << quant::kv_dtype_name(dt);
        }
        const std::vector<float> scales(dt == quant::KvDType::Int8 ? 64 : 0, 1.0f);
        try {
            kv::KvStore store(*be, 1, 4, 4, 64, 32, {dt, scales});
            EXPECT_TRUE(ok.ok()) << quant::kv_dtype_name(dt);
        } catch (const std::invalid_argument& e) {
            ASSERT_FALSE(ok.ok()) << e.what();
            EXPECT_EQ(std::string(e.what()), ok.error().message);
        }
    }
}

// Sampling where the logits are (Backend::sample) picks what engine::Sampler, the host's
// sampler, picks for the same uniform number. Each case's candidates come from the host
// sampler with their probabilities; a draw at the middle of candidate j's interval of the
// cumulative distribution must give candidate j, so a token kept or dropped wrongly by a
// truncation, or an order that differs, shows as a wrong id. Greedy cases must give the
// argmax after biases and penalties.
TEST_P(BackendOps, SamplingPicksWhatTheHostSamplerPicks) {
    const int n_vocab = 3001;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 2.5f);
    std::vector<float> logits(n_vocab);
    for (float& x : logits) x = normal(rng);
    // Ties (which the order breaks by id), both zeros, and a clear favourite.
    for (int i = 0; i < 40; ++i) logits[100 + i] = logits[2000 + i] = 3.25f;
    logits[7] = -0.0f;
    logits[8] = 0.0f;
    logits[2999] = 9.0f;
    std::vector<int32_t> history;
    std::uniform_int_distribution<int32_t> any_token(0, n_vocab - 1);
    for (int i = 0; i < 50; ++i) history.push_back(any_token(rng));
    history.push_back(2999);  // the favourite penalised
    history.push_back(2999);

    struct Case {
        const char* name;
        engine::SamplingParams p;
    };
    auto params = [](float t, int k, float top_p, float min_p) {
        engine::SamplingParams p;
        p.temperature = t;
        p.top_k = k;
        p.top_p = top_p;
        p.min_p = min_p;
        return p;
    };
    std::vector<Case> cases = {
        {"defaults", params(0.8f, 40, 0.95f, 0.05f)},
        {"top-k", params(1.3f, 200, 1.0f, 0.0f)},
        {"top-k into ties", params(1.0f, 120, 1.0f, 0.0f)},
        {"top-p", params(0.7f, 0, 0.9f, 0.0f)},
        {"top-p wide", params(2.0f, 0, 0.99f, 0.0f)},
        {"min-p", params(1.0f, 0, 1.0f, 0.02f)},
        {"min-p above one", params(1.0f, 0, 1.0f, 1.5f)},
        {"top-p zero", params(1.0f, 50, 0.0f, 0.0f)},
        {"top-k off by size", params(0.9f, n_vocab, 0.8f, 0.0f)},
        {"top-k past the list", params(1.1f, 1500, 0.97f, 0.01f)},
        {"untruncated", params(1.0f, 0, 1.0f, 0.0f)},
        {"untruncated hot", params(3.0f, 0, 1.0f, 0.0f)},
        {"greedy", params(0.0f, 40, 0.95f, 0.05f)},
        {"top-k one", params(1.0f, 1, 1.0f, 0.0f)},
    };
    for (size_t i = 0, n = cases.size(); i < n; ++i) {
        Case c = cases[i];
        c.p.repetition_penalty = 1.3f;
        c.p.presence_penalty = 0.5f;
        c.p.frequency_penalty = 0.25f;
        c.p.penalty_last_n = 24;
        c.p.logit_bias = {{5, 4.0f}, {5, 1.5f}, {2000, -100.0f}, {n_vocab + 3, 7.0f}, {9, 12.0f}};
        cases.push_back(c);
    }
    for (size_t ci = 0; ci < cases.size(); ++ci) {
        const Case& c = cases[ci];
        const std::string what = fmt::format("{}{}", c.name, ci >= 14 ? " + penalties" : "");
        engine::Sampler host(c.p);
        const auto cand = host.candidates(logits, history);
        ASSERT_FALSE(cand.empty()) << what;
        // The draws to check: every candidate's middle when there are few, else a spread.
        std::vector<std::pair<double, int32_t>> draws;
        double acc = 0;
        const size_t stride = std::max<size_t>(1, cand.size() / 150);
        for (size_t j = 0; j < cand.size(); ++j) {
            // An interval narrower than the two sides' rounding (or empty: a probability that
            // underflowed) is no test of anything.
            if ((j % stride == 0 || j + 1 == cand.size()) && cand[j].p > 1e-5f)
                draws.push_back({acc + cand[j].p / 2, cand[j].id});
            acc += cand[j].p;
        }
        ASSERT_FALSE(draws.empty()) << what;
        std::vector<kernels::SampleRow> rows;
        std::vector<kernels::LogitEdit> edits;
        for (const auto& [u, id] : draws) {
            engine::Sampler s(c.p);
            rows.push_back(s.device_row(history, edits));
            rows.back().u = u;
        }
        std::vector<float> tiled;
        for (size_t r = 0; r < rows.size(); ++r)
            tiled.insert(tiled.end(), logits.begin(), logits.end());
        Tensor t = put(tiled, static_cast<int64_t>(rows.size()), n_vocab);
        std::vector<int32_t> got(rows.size(), -1);
        be->sample(t, rows, edits, {}, got);
        for (size_t r = 0; r < rows.size(); ++r)
            ASSERT_EQ(got[r], draws[r].second)
                << what << ": draw " << r << " of " << rows.size() << " at u = " << draws[r].first;
    }
}

// A seeded request gives the same tokens whichever side draws: the device draws with numbers
// taken from the request's generator exactly as the host sampler takes them (one a draw, even
// from a single candidate), and the penalties follow each side's own history.
TEST_P(BackendOps, SeededDrawsFollowTheHostSamplersStream) {
    const int n_vocab = 512, steps = 200;
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.5f);
    engine::SamplingParams p;
    p.seed = 1234;
    p.has_seed = true;
    p.repetition_penalty = 1.1f;
    std::vector<int32_t> host_tokens, device_tokens;
    std::vector<float> logits(n_vocab);
    // Each side keeps a sampler for the sampled steps and one for the greedy steps between.
    engine::Sampler host_plain(p), device_plain(p);
    engine::SamplingParams g = p;
    g.temperature = 0;
    engine::Sampler host_greedy(g), device_greedy(g);
    int not_argmax = 0;
    for (int step = 0; step < steps; ++step) {
        for (float& x : logits) x = normal(rng);
        const bool greedy = step % 4 == 3;
        engine::Sampler& h = greedy ? host_greedy : host_plain;
        engine::Sampler& d = greedy ? device_greedy : device_plain;
        host_tokens.push_back(h.sample(logits, host_tokens));
        not_argmax +=
            host_tokens.back() != std::max_element(logits.begin(), logits.end()) - logits.begin();
        std::vector<kernels::LogitEdit> edits;
        const kernels::SampleRow row = d.device_row(device_tokens, edits);
        Tensor t = put(logits, 1, n_vocab);
        int32_t id = -1;
        be->sample(t, {&row, 1}, edits, {}, {&id, 1});
        device_tokens.push_back(id);
    }
    EXPECT_EQ(device_tokens, host_tokens);
    EXPECT_GT(not_argmax, steps / 4);  // the draws really drew
}

// A grammar's mask: the draw keeps to the allowed tokens exactly as the host's sampler over
// logits masked to -inf does (midpoints of its candidates' intervals, as above), and a mask
// that allows nothing gives -1.
TEST_P(BackendOps, SamplingKeepsToTheMaskAsTheHostSamplerDoes) {
    const int n_vocab = 4000;  // a third allowed: more than sample_row.h's list holds
    const auto words = static_cast<size_t>(kernels::mask_words(n_vocab));
    std::mt19937 rng(21);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> logits(n_vocab);
    for (float& x : logits) x = normal(rng);
    std::vector<uint64_t> mask(words, 0);
    for (int i = 0; i < n_vocab; ++i)
        if (rng() % 3 == 0) mask[i >> 6] |= uint64_t{1} << (i & 63);
    std::vector<float> masked = logits;
    for (int i = 0; i < n_vocab; ++i)
        if (!((mask[i >> 6] >> (i & 63)) & 1)) masked[i] = -INFINITY;
    for (const auto& [t, k, top_p] : std::vector<std::tuple<float, int, float>>{{0.0f, 0, 1.0f},
                                                                                {1.0f, 40, 1.0f},
                                                                                {0.8f, 0, 0.9f},
                                                                                {2.0f, 0, 0.99f},
                                                                                {1.0f, 0, 1.0f}}) {
        engine::SamplingParams p;
        p.temperature = t;
        p.top_k = k;
        p.top_p = top_p;
        p.min_p = 0;
        engine::Sampler host(p);
        const auto cand = host.candidates(masked, {});
        std::vector<std::pair<double, int32_t>> draws;
        double acc = 0;
        for (const auto& c : cand) {
            if (c.p > 1e-5f) draws.push_back({acc + c.p / 2, c.id});
            acc += c.p;
        }
        ASSERT_FALSE(draws.empty());
        std::vector<kernels::SampleRow> rows;
        std::vector<kernels::LogitEdit> edits;
        std::vector<float> tiled;
        for (const auto& [u, id] : draws) {
            engine::Sampler s(p);
            rows.push_back(s.device_row({}, edits));
            rows.back().u = u;
            rows.back().mask_at = 0;
            tiled.insert(tiled.end(), logits.begin(), logits.end());
        }
        Tensor x = put(tiled, static_cast<int64_t>(rows.size()), n_vocab);
        std::vector<int32_t> got(rows.size(), -2);
        be->sample(x, rows, edits, mask, got);
        for (size_t r = 0; r < rows.size(); ++r) {
            ASSERT_EQ(got[r], draws[r].second) << "t " << t << " k " << k << " draw " << r;
            ASSERT_TRUE((mask[got[r] >> 6] >> (got[r] & 63)) & 1);
        }
    }
    // Nothing allowed: -1; a mask past the end of the list is refused.
    const std::vector<uint64_t> none(words, 0);
    kernels::SampleRow r;
    r.temperature = 1.0f;
    r.u = 0.5;
    r.mask_at = 0;
    Tensor x = put(logits, 1, n_vocab);
    int32_t id = 0;
    be->sample(x, {&r, 1}, {}, none, {&id, 1});
    EXPECT_EQ(id, -1);
    r.mask_at = 1;
    EXPECT_THROW(be->sample(x, {&r, 1}, {}, none, {&id, 1}), std::invalid_argument);
}

TEST_P(BackendOps, SamplingRefusesBadArgumentsAndNeverPicksNaN) {
    Tensor t = put(std::vector<float>(2 * 16, 0.5f), 2, 16);
    std::vector<int32_t> out(2);
    kernels::SampleRow r;
    r.first_edit = 1;
    r.n_edits = 2;
    const std::vector<kernels::LogitEdit> one(1);
    EXPECT_THROW(be->sample(t, {&r, 1}, one, {}, out), std::invalid_argument);
    const std::vector<kernels::SampleRow> three(3);
    EXPECT_THROW(be->sample(t, three, {}, {}, out), std::invalid_argument);
    // Equal logits: greedy takes the lowest id; a NaN never wins, as on the host.
    std::vector<float> rows(2 * 16, 0.5f);
    rows[16] = std::nanf("");
    Tensor u = put(rows, 2, 16);
    const std::vector<kernels::SampleRow> two(2);
    be->sample(u, two, {}, {}, out);
    EXPECT_EQ(out, (std::vector<int32_t>{0, 1}));
    // A NaN in a truncated draw's row makes its softmax NaN: the most likely of the others, as
    // the host's sampler picks.
    std::vector<float> row(16, 0.5f);
    row[3] = std::nanf("");
    row[9] = 2.0f;
    engine::SamplingParams sp;
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 0.9f;
    sp.min_p = 0.0f;
    engine::Sampler host(sp), device(sp);
    const int32_t want = host.sample(row, {});
    EXPECT_EQ(want, 9);
    std::vector<kernels::LogitEdit> edits;
    const kernels::SampleRow nan_row = device.device_row({}, edits);
    Tensor v = put(row, 1, 16);
    int32_t got = -2;
    be->sample(v, {&nan_row, 1}, edits, {}, {&got, 1});
    EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(Levels, BackendOps, ::testing::ValuesIn(params()), param_name);

TEST(Backend, DescribesItselfAndRefusesADeviceItWasNotBuiltWith) {
    auto cpu = kernels::make_backend({.threads = 1, .activations = kernels::Activations::Int8});
    ASSERT_TRUE(cpu.ok());
    EXPECT_EQ((*cpu)->device(), Device::CPU);
    EXPECT_EQ(kernels::backend_property(**cpu, "backend"), "cpu");
    EXPECT_EQ(kernels::backend_property(**cpu, "threads"), "1");
    EXPECT_EQ(kernels::backend_property(**cpu, "activations"), "int8");
    EXPECT_EQ(kernels::backend_property(**cpu, "cpu_level"),
              kernels::cpu::cpu_level_name(kernels::cpu::cpu_level()));
#ifndef FERRY_CUDA
    auto cuda = kernels::make_backend({.device = Device::CUDA, .threads = 0, .activations = {}});
    ASSERT_FALSE(cuda.ok());
    EXPECT_NE(cuda.error().message.find("cuda"), std::string::npos);
#endif
}

}  // namespace
