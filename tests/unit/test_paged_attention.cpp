// Attention over the paged KV cache: every SIMD level against the scalar reference (random
// inputs, odd head dims and lengths, extreme and equal scores, NaN), and the properties the
// engine relies on bit for bit: results independent of the block size, of the other rows
// computed with a query (GQA heads, other tokens, other sequences) and of the thread count;
// each for f32 keys and values and for the f16, int8 and fp8 caches (quant/kv_format.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernel_levels.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/paged_attention.h"
#include "quant/kv_format.h"

namespace {
using namespace ferry;
using kernels::cpu::CpuLevel;

using ferry::testing::LevelGuard;
using ferry::testing::simd_levels;

using quant::KvDType;
constexpr KvDType kAllTypes[] = {KvDType::F32, KvDType::F16, KvDType::Int8, KvDType::FP8};

// Keys and values of n_kv positions (`stride` floats each) stored as `dtype` into blocks of
// block_size positions laid out as the KvStore does (kv_dtype.h). f32 blocks are exactly
// sized, so reads past the last position are bugs a sanitizer sees. Quantized types get a
// scale per (position, head of `hd` elements); int8 keys per-channel scales from the data.
struct Paged {
    std::vector<std::vector<std::byte>> kb, vb;
    std::vector<const void*> kp, vp;
    std::vector<float> channel_scales;  // int8 keys: stride floats
    kernels::cpu::PagedKvView view(size_t head_offset) const {
        return {kp.data(),
                vp.data(),
                block_size,
                stride,
                head_offset,
                quant::kv_scale_offset(dtype, block_size, stride),
                dtype,
                static_cast<int>(stride / hd),
                static_cast<int>(head_offset / hd),
                channel_scales.empty() ? nullptr : channel_scales.data() + head_offset};
    }
    int block_size = 0;
    size_t stride = 0;
    KvDType dtype = KvDType::F32;
    int hd = 1;
};

Paged make_paged(const std::vector<float>& k, const std::vector<float>& v, int64_t n_kv,
                 size_t stride, int block_size, KvDType dtype = KvDType::F32, int hd = 0,
                 const std::vector<float>* channel_scales = nullptr) {
    Paged p;
    p.block_size = block_size;
    p.stride = stride;
    p.dtype = dtype;
    p.hd = hd > 0 ? hd : static_cast<int>(stride);
    const int heads = static_cast<int>(stride / p.hd);
    if (dtype == KvDType::Int8 && channel_scales) {
        p.channel_scales = *channel_scales;
    } else if (dtype == KvDType::Int8) {
        p.channel_scales.assign(stride, 1e-4f);
        for (int64_t i = 0; i < n_kv; ++i)
            for (size_t c = 0; c < stride; ++c)
                p.channel_scales[c] = std::max(p.channel_scales[c], std::fabs(k[i * stride + c]));
        for (float& s : p.channel_scales) s /= quant::kInt8Max;
    }
    const size_t eb = quant::kv_elem_bytes(dtype);
    const size_t scale_off = quant::kv_scale_offset(dtype, block_size, stride);
    const int64_t nb = (n_kv + block_size - 1) / block_size;
    for (int64_t b = 0; b < nb; ++b) {
        const int64_t len = std::min<int64_t>(block_size, n_kv - b * block_size);
        for (int key = 0; key < 2; ++key) {
            const std::vector<float>& x = key ? k : v;
            const size_t bytes =
                dtype == KvDType::F32
                    ? len * stride * sizeof(float)
                    : quant::kv_region_bytes(dtype, key, block_size, stride, std::max(heads, 1));
            std::vector<std::byte> r(bytes);
            for (int64_t s = 0; s < len; ++s) {
                const float* row = &x[(b * block_size + s) * stride];
                if (dtype == KvDType::F32) {
                    std::memcpy(&r[s * stride * 4], row, stride * 4);
                    continue;
                }
                for (int h = 0; h < heads; ++h) {
                    float scale = 0;
                    quant::quantize_kv_row(
                        dtype, row + h * p.hd, p.hd, &r[(s * stride + h * p.hd) * eb], &scale,
                        key && dtype == KvDType::Int8 ? &p.channel_scales[h * p.hd] : nullptr);
                    if (quant::kv_token_scales(dtype, key))
                        std::memcpy(&r[scale_off + (s * heads + h) * sizeof(float)], &scale,
                                    sizeof(float));
                }
            }
            (key ? p.kb : p.vb).push_back(std::move(r));
        }
    }
    for (int64_t b = 0; b < nb; ++b) {
        p.kp.push_back(p.kb[b].data());
        p.vp.push_back(p.vb[b].data());
    }
    return p;
}

std::vector<float> random_vec(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> x(n);
    for (auto& e : x) e = d(rng);
    return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> run_one(const float* q, const Paged& p, size_t head_offset, int64_t n_kv, int hd,
                           float scale) {
    std::vector<float> out(hd, 123.0f);
    kernels::cpu::attend_paged(q, p.view(head_offset), n_kv, hd, scale, out.data());
    return out;
}

std::vector<float> run_ref(const float* q, const Paged& p, size_t head_offset, int64_t n_kv, int hd,
                           float scale) {
    std::vector<float> out(hd, 123.0f);
    kernels::cpu::attend_paged_reference(q, p.view(head_offset), n_kv, hd, scale, out.data());
    return out;
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, float tol,
                     const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t d = 0; d < got.size(); ++d)
        ASSERT_NEAR(got[d], want[d], tol * (1.0f + std::fabs(want[d]))) << what << " d=" << d;
}

TEST(PagedAttention, EveryLevelMatchesReference) {
    LevelGuard guard;
    std::mt19937 rng(7);
    for (int hd : {1, 3, 8, 17, 64, 65, 128}) {
        for (int64_t n_kv : {1, 2, 15, 16, 17, 255, 1000}) {
            const size_t stride = 2 * hd + 5;  // two KV heads and some padding: offsets matter
            const auto k = random_vec(n_kv * stride, rng, -2.0f, 2.0f);
            const auto v = random_vec(n_kv * stride, rng);
            const auto q = random_vec(hd, rng, -2.0f, 2.0f);
            const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
            for (KvDType t : kAllTypes) {
                const Paged p = make_paged(k, v, n_kv, stride, 16, t, hd);
                const auto want = run_ref(q.data(), p, hd, n_kv, hd, scale);
                for (CpuLevel l : simd_levels(true)) {
                    kernels::cpu::set_cpu_level(l);
                    const auto got = run_one(q.data(), p, hd, n_kv, hd, scale);
                    expect_near_all(got, want, 2e-5f,
                                    std::string(kernels::cpu::cpu_level_name(l)) + " " +
                                        quant::kv_dtype_name(t) + " hd=" + std::to_string(hd) +
                                        " n_kv=" + std::to_string(n_kv));
                }
            }
        }
    }
}

// A sliding window: positions before kv_start get no weight, at every level and KV type, and
// for f32 keys the result is softmax attention over the window alone, computed here.
TEST(PagedAttention, SlidingWindowAttendsOnlyInsideIt) {
    LevelGuard guard;
    std::mt19937 rng(5);
    const int hd = 24;
    const int64_t n_kv = 70;
    const size_t stride = hd;
    const auto k = random_vec(n_kv * stride, rng, -2.0f, 2.0f);
    const auto v = random_vec(n_kv * stride, rng);
    const auto q = random_vec(hd, rng, -2.0f, 2.0f);
    const float scale = 0.3f;
    for (int64_t start : {int64_t(1), int64_t(16), int64_t(37), n_kv - 1}) {
        std::vector<double> want(hd, 0.0), w(static_cast<size_t>(n_kv), 0.0);
        double mx = -1e300, z = 0;
        for (int64_t p = start; p < n_kv; ++p) {
            double s = 0;
            for (int d = 0; d < hd; ++d) s += double(q[d]) * k[p * stride + d];
            w[p] = s * scale;
            mx = std::max(mx, w[p]);
        }
        for (int64_t p = start; p < n_kv; ++p) z += (w[p] = std::exp(w[p] - mx));
        for (int64_t p = start; p < n_kv; ++p)
            for (int d = 0; d < hd; ++d) want[d] += w[p] / z * v[p * stride + d];
        for (KvDType t : kAllTypes) {
            const Paged p = make_paged(k, v, n_kv, stride, 16, t, hd);
            std::vector<float> ref(hd);
            kernels::cpu::attend_paged_reference(q.data(), p.view(0), n_kv, hd, scale, ref.data(),
                                                 start);
            if (t == KvDType::F32) {
                for (int d = 0; d < hd; ++d)
                    ASSERT_NEAR(ref[d], want[d], 1e-5) << "start " << start;
            }
            for (CpuLevel l : simd_levels(true)) {
                kernels::cpu::set_cpu_level(l);
                std::vector<float> got(hd, 123.0f);
                const kernels::cpu::AttnRow row{q.data(), got.data(), n_kv, start};
                kernels::cpu::attend_paged_rows({&row, 1}, p.view(0), hd, scale);
                expect_near_all(got, ref, 2e-5f,
                                std::string(kernels::cpu::cpu_level_name(l)) + " " +
                                    quant::kv_dtype_name(t) + " start=" + std::to_string(start));
            }
            // Positions before the window are never read: NaN there (a block given back and
            // rewritten since) changes nothing, also for two rows with windows apart.
            if (t != KvDType::F32 && t != KvDType::F16) continue;
            auto kn = k, vn = v;
            const int64_t first = std::max<int64_t>(0, start - 5);
            for (size_t i = 0; i < static_cast<size_t>(first) * stride; ++i)
                kn[i] = vn[i] = std::nanf("");
            const Paged pn = make_paged(kn, vn, n_kv, stride, 16, t, hd);
            std::vector<float> ref2(hd);
            kernels::cpu::attend_paged_reference(q.data(), p.view(0), n_kv - 3, hd, scale,
                                                 ref2.data(), first);
            for (CpuLevel l : simd_levels(true)) {
                kernels::cpu::set_cpu_level(l);
                std::vector<float> a(hd), b(hd);
                const kernels::cpu::AttnRow rows[] = {{q.data(), a.data(), n_kv, start},
                                                      {q.data(), b.data(), n_kv - 3, first}};
                kernels::cpu::attend_paged_rows(rows, pn.view(0), hd, scale);
                const std::string what = std::string(kernels::cpu::cpu_level_name(l)) + " " +
                                         quant::kv_dtype_name(t) + " poisoned before " +
                                         std::to_string(first);
                expect_near_all(a, ref, 2e-5f, what);
                expect_near_all(b, ref2, 2e-5f, what);
            }
        }
    }
}

// A draft tree's row sees the positions before the tree and, of the tree's, only those its mask
// names: the same result as attending over exactly those positions, at every level and type,
// each row of a tile with its own mask, and bit for bit the result of those positions laid out
// one after another (the branch run as a chain).
TEST(PagedAttention, TreeMaskSeesOnlyTheRowsBranch) {
    LevelGuard guard;
    std::mt19937 rng(9);
    const int hd = 40;
    const int64_t n_kv = 45, tree_start = 30;  // 15 tree positions across a block boundary
    const size_t stride = hd;
    const auto k = random_vec(n_kv * stride, rng, -2.0f, 2.0f);
    const auto v = random_vec(n_kv * stride, rng);
    const float scale = 0.25f;
    const uint64_t masks[] = {0x1, 0x5, 0x4005, 0x7fff, 0x2a81};
    std::vector<std::vector<float>> qs;
    for (size_t r = 0; r < std::size(masks); ++r) qs.push_back(random_vec(hd, rng, -2.0f, 2.0f));
    for (KvDType t : kAllTypes) {
        const Paged p = make_paged(k, v, n_kv, stride, 16, t, hd);
        std::vector<Paged> seen;
        std::vector<int64_t> seen_n;
        for (size_t r = 0; r < std::size(masks); ++r) {
            // The positions the row sees, gathered into a plain cache of their own.
            std::vector<float> ks, vs;
            for (int64_t pos = 0; pos < n_kv; ++pos)
                if (pos < tree_start || ((masks[r] >> (pos - tree_start)) & 1)) {
                    ks.insert(ks.end(), k.begin() + pos * stride, k.begin() + (pos + 1) * stride);
                    vs.insert(vs.end(), v.begin() + pos * stride, v.begin() + (pos + 1) * stride);
                }
            const int64_t n_seen = static_cast<int64_t>(ks.size() / stride);
            seen.push_back(make_paged(ks, vs, n_seen, stride, 16, t, hd));
            seen_n.push_back(n_seen);
            std::vector<float> want(hd), ref(hd);
            kernels::cpu::attend_paged_reference(qs[r].data(), seen.back().view(0), n_seen, hd,
                                                 scale, want.data());
            kernels::cpu::attend_paged_reference(qs[r].data(), p.view(0), n_kv, hd, scale,
                                                 ref.data(), 0, nullptr, tree_start, masks[r]);
            // int8 keys' per-channel scales come from all the data: the gathered copy differs.
            if (t != KvDType::Int8)
                expect_near_all(ref, want, 1e-5f, "reference, mask " + std::to_string(r));
        }
        for (CpuLevel l : simd_levels(true)) {
            kernels::cpu::set_cpu_level(l);
            std::vector<std::vector<float>> got(std::size(masks), std::vector<float>(hd, 7.0f));
            std::vector<kernels::cpu::AttnRow> rows;
            for (size_t r = 0; r < std::size(masks); ++r)
                rows.push_back(
                    {qs[r].data(), got[r].data(), n_kv, 0, nullptr, tree_start, masks[r]});
            kernels::cpu::attend_paged_rows(rows, p.view(0), hd, scale);
            for (size_t r = 0; r < std::size(masks); ++r) {
                const std::string what = std::string(kernels::cpu::cpu_level_name(l)) + " " +
                                         quant::kv_dtype_name(t) + " mask " + std::to_string(r);
                std::vector<float> ref(hd);
                kernels::cpu::attend_paged_reference(qs[r].data(), p.view(0), n_kv, hd, scale,
                                                     ref.data(), 0, nullptr, tree_start, masks[r]);
                expect_near_all(got[r], ref, 2e-5f, what);
                // Bit for bit the branch's own chain: the positions it sees, one after another.
                if (t == KvDType::Int8) continue;
                const Paged& chain = seen[r];
                std::vector<float> alone(hd);
                const kernels::cpu::AttnRow row{qs[r].data(), alone.data(), seen_n[r]};
                kernels::cpu::attend_paged_rows({&row, 1}, chain.view(0), hd, scale);
                EXPECT_EQ(got[r], alone) << what;
            }
        }
    }
}

TEST(PagedAttention, ResultsDoNotDependOnBlockSize) {
    LevelGuard guard;
    std::mt19937 rng(11);
    for (CpuLevel l : simd_levels()) {
        kernels::cpu::set_cpu_level(l);
        for (int hd : {17, 64}) {
            for (int64_t n_kv : {1, 15, 16, 17, 255, 1000}) {
                const size_t stride = 3 * hd;
                const auto k = random_vec(n_kv * stride, rng);
                const auto v = random_vec(n_kv * stride, rng);
                const auto q = random_vec(hd, rng, -3.0f, 3.0f);
                for (KvDType t : kAllTypes) {
                    std::vector<float> first;
                    for (int bs : {1, 7, 16, 256}) {
                        const Paged p = make_paged(k, v, n_kv, stride, bs, t, hd);
                        const auto out = run_one(q.data(), p, 2 * hd, n_kv, hd, 0.125f);
                        if (first.empty())
                            first = out;
                        else
                            EXPECT_TRUE(same_bits(out, first))
                                << kernels::cpu::cpu_level_name(l) << " " << quant::kv_dtype_name(t)
                                << " hd=" << hd << " n_kv=" << n_kv << " block_size=" << bs;
                    }
                }
            }
        }
    }
}

// Rows computed together (a GQA group, consecutive tokens with causal lengths, more rows than
// one kernel call takes) give exactly what each gives alone.
TEST(PagedAttention, RowsTogetherEqualRowsAlone) {
    LevelGuard guard;
    std::mt19937 rng(13);
    const int hd = 64;
    const int64_t n_kv = 300;
    const size_t stride = 3 * hd;
    const auto k = random_vec(n_kv * stride, rng);
    const auto v = random_vec(n_kv * stride, rng);
    for (KvDType t : kAllTypes)
        for (CpuLevel l : simd_levels(true)) {
            kernels::cpu::set_cpu_level(l);
            SCOPED_TRACE(quant::kv_dtype_name(t));
            const Paged p = make_paged(k, v, n_kv, stride, 16, t, hd);
            for (int nr : {2, 3, 9, 16, 70}) {
                const auto q = random_vec(static_cast<size_t>(nr) * hd, rng);
                std::vector<float> out(static_cast<size_t>(nr) * hd);
                std::vector<kernels::cpu::AttnRow> rows;
                for (int r = 0; r < nr; ++r)
                    rows.push_back({&q[r * hd], &out[r * hd], n_kv - (r * 37) % 290});
                kernels::cpu::attend_paged_rows(rows, p.view(hd), hd, 0.125f);
                for (int r = 0; r < nr; ++r) {
                    const auto alone = run_one(&q[r * hd], p, hd, rows[r].n_kv, hd, 0.125f);
                    const std::vector<float> together(&out[r * hd], &out[(r + 1) * hd]);
                    EXPECT_TRUE(same_bits(together, alone))
                        << kernels::cpu::cpu_level_name(l) << " rows=" << nr << " row=" << r;
                    const auto want = run_ref(&q[r * hd], p, hd, rows[r].n_kv, hd, 0.125f);
                    expect_near_all(together, want, 2e-5f, "vs reference");
                }
            }
        }
}

// Scores far apart (one position dominates) and all equal (the output is the mean of V).
TEST(PagedAttention, ExtremeAndEqualScores) {
    LevelGuard guard;
    std::mt19937 rng(17);
    const int hd = 64;
    const int64_t n_kv = 255;
    const size_t stride = hd;
    for (CpuLevel l : simd_levels(true)) {
        kernels::cpu::set_cpu_level(l);
        // Large scores: q.k around +-1e4 after scaling; position 100 wins by a wide margin.
        {
            auto k = random_vec(n_kv * stride, rng, -30.0f, 30.0f);
            const auto v = random_vec(n_kv * stride, rng);
            const auto q = random_vec(hd, rng, -30.0f, 30.0f);
            for (int d = 0; d < hd; ++d) k[100 * stride + d] = q[d] > 0 ? 60.0f : -60.0f;
            const Paged p = make_paged(k, v, n_kv, stride, 16);
            const auto got = run_one(q.data(), p, 0, n_kv, hd, 0.125f);
            for (int d = 0; d < hd; ++d)
                ASSERT_NEAR(got[d], v[100 * stride + d], 1e-6f) << kernels::cpu::cpu_level_name(l);
            expect_near_all(got, run_ref(q.data(), p, 0, n_kv, hd, 0.125f), 1e-6f, "large");
        }
        // Equal scores: every key row the same.
        {
            std::vector<float> k(n_kv * stride);
            const auto row = random_vec(hd, rng, -5.0f, 5.0f);
            for (int64_t p = 0; p < n_kv; ++p) std::copy(row.begin(), row.end(), &k[p * stride]);
            const auto v = random_vec(n_kv * stride, rng);
            const auto q = random_vec(hd, rng, -5.0f, 5.0f);
            const Paged p = make_paged(k, v, n_kv, stride, 16);
            const auto got = run_one(q.data(), p, 0, n_kv, hd, 0.125f);
            for (int d = 0; d < hd; ++d) {
                double mean = 0;
                for (int64_t i = 0; i < n_kv; ++i) mean += v[i * stride + d];
                mean /= static_cast<double>(n_kv);
                ASSERT_NEAR(got[d], mean, 1e-5) << kernels::cpu::cpu_level_name(l) << " d=" << d;
            }
        }
        // No positions: zeros, like the reference.
        {
            const std::vector<float> q(hd, 1.0f);
            const Paged p = make_paged({}, {}, 0, stride, 16);
            const auto got = run_one(q.data(), p, 0, 0, hd, 0.125f);
            for (float x : got) EXPECT_EQ(x, 0.0f);
        }
    }
}

TEST(PagedAttention, NanReachesTheOutput) {
    LevelGuard guard;
    std::mt19937 rng(19);
    const int hd = 64;
    const int64_t n_kv = 40;
    for (CpuLevel l : simd_levels(true)) {
        kernels::cpu::set_cpu_level(l);
        auto k = random_vec(n_kv * hd, rng);
        const auto v = random_vec(n_kv * hd, rng);
        const auto q = random_vec(hd, rng);
        k[20 * hd + 3] = std::numeric_limits<float>::quiet_NaN();
        const Paged p = make_paged(k, v, n_kv, hd, 16);
        const auto got = run_one(q.data(), p, 0, n_kv, hd, 0.125f);
        for (float x : got) EXPECT_TRUE(std::isnan(x)) << kernels::cpu::cpu_level_name(l);
    }
}

// A ragged batch over `paged` (one per sequence): every row matches the reference, and is
// bit-identical whatever the thread count and whatever else is in the batch.
void run_batch_checks(const std::vector<Paged>& paged,
                      const std::vector<kernels::cpu::SeqBlocks>& seqs,
                      const std::vector<int32_t>& tok_seq, const std::vector<int64_t>& tok_pos,
                      const std::vector<float>& q, int n_head, int n_head_kv, int hd, int bs,
                      size_t stride, float tol) {
    LevelGuard guard;
    const int64_t n = static_cast<int64_t>(tok_seq.size());
    // A batch has one layer's int8 key scales for every sequence: the tests give all the same.
    const float* cs = paged[0].channel_scales.empty() ? nullptr : paged[0].channel_scales.data();

    auto run_batch = [&](int threads, int64_t t0, int64_t t1) {
        std::vector<float> out((t1 - t0) * n_head * hd);
        ThreadPool pool(threads);
        const kernels::cpu::AttentionBatch b{
            &q[t0 * n_head * hd],
            out.data(),
            t1 - t0,
            n_head,
            n_head_kv,
            hd,
            0.125f,
            &tok_seq[t0],
            &tok_pos[t0],
            seqs,
            bs,
            // make_paged's layout: positions interleaved
            {stride, static_cast<size_t>(hd), quant::kv_scale_offset(paged[0].dtype, bs, stride)},
            paged[0].dtype,
            cs};
        kernels::cpu::attend_batch(b, pool);
        return out;
    };
    for (CpuLevel l : simd_levels(true)) {
        kernels::cpu::set_cpu_level(l);
        const auto one = run_batch(1, 0, n);
        EXPECT_TRUE(same_bits(run_batch(2, 0, n), one)) << kernels::cpu::cpu_level_name(l);
        EXPECT_TRUE(same_bits(run_batch(3, 0, n), one)) << kernels::cpu::cpu_level_name(l);
        for (int64_t t = 0; t < n; ++t) {  // each token alone, as in a decode step
            const auto alone = run_batch(2, t, t + 1);
            const std::vector<float> in_batch(&one[t * n_head * hd], &one[(t + 1) * n_head * hd]);
            EXPECT_TRUE(same_bits(alone, in_batch))
                << kernels::cpu::cpu_level_name(l) << " t=" << t;
            for (int h = 0; h < n_head; ++h) {
                const Paged& p = paged[tok_seq[t]];
                const auto want =
                    run_ref(&q[(t * n_head + h) * hd], p, (h / (n_head / n_head_kv)) * hd,
                            tok_pos[t] + 1, hd, 0.125f);
                const std::vector<float> got(&in_batch[h * hd], &in_batch[(h + 1) * hd]);
                expect_near_all(got, want, tol, "batch");
            }
        }
    }
}

// A ragged batch shaped like SmolLM2 (9 query heads over 3 KV heads): two sequences, one
// prefilling a chunk and one decoding. Every row matches the reference, and is bit-identical
// whatever the thread count and whatever else is in the batch.
TEST(PagedAttention, BatchGqaMatchesReferenceAndIsBatchInvariant) {
    LevelGuard guard;
    std::mt19937 rng(23);
    const int n_head = 9, n_head_kv = 3, hd = 64, bs = 16;
    const size_t stride = static_cast<size_t>(n_head_kv) * hd;
    const int64_t len[2] = {200, 37};
    std::vector<Paged> paged;
    for (int64_t n : len) {
        const auto k = random_vec(n * stride, rng);
        const auto v = random_vec(n * stride, rng);
        paged.push_back(make_paged(k, v, n, stride, bs));
    }
    // Sequence 0: tokens at positions 180..199 (a prefill chunk); sequence 1: position 36.
    std::vector<int32_t> tok_seq;
    std::vector<int64_t> tok_pos;
    for (int64_t pos = 180; pos < 200; ++pos) tok_seq.push_back(0), tok_pos.push_back(pos);
    tok_seq.push_back(1), tok_pos.push_back(36);
    const int64_t n = static_cast<int64_t>(tok_seq.size());
    const auto q = random_vec(n * n_head * hd, rng);
    std::vector<kernels::cpu::SeqBlocks> seqs;
    for (const Paged& p : paged) seqs.push_back({p.kp.data(), p.vp.data()});
    run_batch_checks(paged, seqs, tok_seq, tok_pos, q, n_head, n_head_kv, hd, bs, stride, 2e-5f);
}

// For each KV type: sequences of lengths `len` (keys in [-3, 3], int8 keys' channel scales per
// sequence here, which the kernel allows) and a batch of (sequence, position) tokens, through
// run_batch_checks.
void check_batch_per_kv_type(std::mt19937& rng, int n_head, int n_head_kv,
                             std::initializer_list<KvDType> types, std::vector<int64_t> len,
                             const std::vector<int32_t>& tok_seq,
                             const std::vector<int64_t>& tok_pos) {
    const int hd = 64, bs = 16;
    const size_t stride = static_cast<size_t>(n_head_kv) * hd;
    const std::vector<float> scales(stride, 3.0f / quant::kInt8Max);
    for (KvDType t : types) {
        std::vector<Paged> paged;
        for (int64_t n : len) {
            const auto k = random_vec(n * stride, rng, -3.0f, 3.0f);
            const auto v = random_vec(n * stride, rng);
            paged.push_back(make_paged(k, v, n, stride, bs, t, hd, &scales));
        }
        const int64_t n = static_cast<int64_t>(tok_seq.size());
        const auto q = random_vec(n * n_head * hd, rng);
        std::vector<kernels::cpu::SeqBlocks> seqs;
        for (const Paged& p : paged) seqs.push_back({p.kp.data(), p.vp.data()});
        SCOPED_TRACE(quant::kv_dtype_name(t));
        run_batch_checks(paged, seqs, tok_seq, tok_pos, q, n_head, n_head_kv, hd, bs, stride,
                         2e-5f);
    }
}

// The same for every KV type: a quantized cache is a different input, not a different
// contract.
TEST(PagedAttention, QuantizedBatchMatchesReferenceAndIsBatchInvariant) {
    std::mt19937 rng(29);
    std::vector<int32_t> tok_seq;
    std::vector<int64_t> tok_pos;
    for (int64_t pos = 180; pos < 200; ++pos) tok_seq.push_back(0), tok_pos.push_back(pos);
    tok_seq.push_back(1), tok_pos.push_back(36);
    check_batch_per_kv_type(rng, 9, 3, {KvDType::F16, KvDType::Int8, KvDType::FP8}, {200, 37},
                            tok_seq, tok_pos);
}

// TinyLlama's and Qwen2.5-3B's wider groups (8 query heads over a KV head; here 32 over 4): one
// decode token is already 32 rows, enough for the prompt's four shares per thread, and a
// group's rows must give the same bits whichever shares and tiles they land in. Three decoding
// sequences and a prefill chunk of a fourth.
TEST(PagedAttention, WideGqaGroupsMatchReferenceAndAreBatchInvariant) {
    std::mt19937 rng(31);
    std::vector<int32_t> tok_seq = {0, 1, 2};
    std::vector<int64_t> tok_pos = {69, 36, 128};
    for (int64_t pos = 15; pos < 20; ++pos) tok_seq.push_back(3), tok_pos.push_back(pos);
    check_batch_per_kv_type(rng, 32, 4, {KvDType::F32, KvDType::F16, KvDType::Int8},
                            {70, 37, 129, 20}, tok_seq, tok_pos);
}

}  // namespace

namespace {

// H2O's block scores: a row's softmax weights summed per block, computed here in double, equal
// at every level and KV type (f32 keys exactly as defined; the others through the same stored
// bits as the reference), and they add up to 1 over the attended blocks.
TEST(PagedAttention, AttentionMassPerBlockIsTheSoftmaxWeights) {
    LevelGuard guard;
    std::mt19937 rng(9);
    const int hd = 40;
    const int64_t n_kv = 83;  // five full blocks of 16 and a partial one
    const auto k = random_vec(n_kv * hd, rng, -2.0f, 2.0f);
    const auto v = random_vec(n_kv * hd, rng);
    const auto q = random_vec(hd, rng, -2.0f, 2.0f);
    const float scale = 0.4f;
    const size_t nb = (n_kv + 15) / 16;
    for (int64_t start : {int64_t(0), int64_t(21)}) {
        std::vector<double> s(static_cast<size_t>(n_kv)), want(nb, 0.0);
        double mx = -1e300, z = 0;
        for (int64_t p = start; p < n_kv; ++p) {
            for (int d = 0; d < hd; ++d) s[p] += double(q[d]) * k[p * hd + d];
            mx = std::max(mx, s[p] *= scale);
        }
        for (int64_t p = start; p < n_kv; ++p) z += std::exp(s[p] - mx);
        for (int64_t p = start; p < n_kv; ++p) want[p / 16] += std::exp(s[p] - mx) / z;
        for (KvDType t : kAllTypes) {
            const Paged p = make_paged(k, v, n_kv, hd, 16, t, hd);
            std::vector<float> ref_out(hd), ref(nb, 0.5f);  // added to, not overwritten
            kernels::cpu::attend_paged_reference(q.data(), p.view(0), n_kv, hd, scale,
                                                 ref_out.data(), start, ref.data());
            double total = 0;
            for (size_t b = 0; b < nb; ++b) total += ref[b] - 0.5;
            EXPECT_NEAR(total, 1.0, 1e-5) << quant::kv_dtype_name(t);
            if (t == KvDType::F32) {
                for (size_t b = 0; b < nb; ++b) EXPECT_NEAR(ref[b] - 0.5, want[b], 1e-6) << b;
            }
            if (start > 16) {
                EXPECT_EQ(ref[0], 0.5f);  // a block before the window gets nothing
            }
            for (CpuLevel l : simd_levels(true)) {
                kernels::cpu::set_cpu_level(l);
                std::vector<float> out(hd), mass(nb, 0.5f), other(hd);
                const kernels::cpu::AttnRow rows[] = {
                    {q.data(), out.data(), n_kv, start, mass.data()},
                    {q.data(), other.data(), n_kv - 7, 0}};
                kernels::cpu::attend_paged_rows(rows, p.view(0), hd, scale);
                expect_near_all(mass, ref, 1e-6f,
                                std::string(kernels::cpu::cpu_level_name(l)) + " " +
                                    quant::kv_dtype_name(t) + " mass, start " +
                                    std::to_string(start));
                expect_near_all(out, ref_out, 2e-5f, "output unchanged by mass");
            }
        }
    }
}

}  // namespace
