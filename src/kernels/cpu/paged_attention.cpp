#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/dispatch.h"

namespace ferry::kernels::cpu {

void attend_paged_reference(const float* q, const PagedKvView& kv, int64_t n_kv, int head_dim,
                            float scale, float* out, int64_t kv_start, float* mass,
                            int64_t tree_start, uint64_t tree_mask) {
    const size_t eb = quant::kv_elem_bytes(kv.dtype);
    const size_t scale_off = kv.scale_offset;
    const bool k_scaled = quant::kv_token_scales(kv.dtype, true);
    const bool v_scaled = quant::kv_token_scales(kv.dtype, false);
    std::vector<float> kp(head_dim), vp(head_dim);
    // Per block, the weights so far on the running maximum's scale, rescaled with l.
    std::vector<float> block_w(
        mass ? static_cast<size_t>((n_kv + kv.block_size - 1) / kv.block_size) : 0);
    float m = -std::numeric_limits<float>::infinity(), l = 0;
    std::fill(out, out + head_dim, 0.0f);
    for (int64_t start = 0, b = 0; start < n_kv; start += kv.block_size, ++b) {
        const int64_t len = std::min<int64_t>(kv.block_size, n_kv - start);
        const auto* kb = static_cast<const std::byte*>(kv.k_blocks[b]);
        const auto* vb = static_cast<const std::byte*>(kv.v_blocks[b]);
        for (int64_t p = 0; p < len; ++p) {
            if (start + p < kv_start) continue;
            if (tree_start >= 0 && start + p >= tree_start &&
                ((tree_mask >> (start + p - tree_start)) & 1) == 0)
                continue;
            const size_t at = (p * kv.stride + kv.head_offset) * eb;
            const size_t si = static_cast<size_t>(p) * kv.scales_per_pos + kv.scale_index;
            const float ks = k_scaled ? reinterpret_cast<const float*>(kb + scale_off)[si] : 0;
            const float vs = v_scaled ? reinterpret_cast<const float*>(vb + scale_off)[si] : 0;
            quant::dequantize_kv_row(kv.dtype, kb + at, head_dim, ks, kv.k_channel_scale,
                                     kp.data());
            quant::dequantize_kv_row(kv.dtype, vb + at, head_dim, vs, nullptr, vp.data());
            float s = 0;
            for (int d = 0; d < head_dim; ++d) s += q[d] * kp[d];
            s *= scale;
            if (s > m) {  // rescale what has been accumulated to the new maximum
                const float c = std::exp(m - s);
                l *= c;
                for (int d = 0; d < head_dim; ++d) out[d] *= c;
                for (float& bw : block_w) bw *= c;
                m = s;
            }
            const float w = std::exp(s - m);
            l += w;
            if (mass) block_w[static_cast<size_t>(b)] += w;
            for (int d = 0; d < head_dim; ++d) out[d] += w * vp[d];
        }
    }
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    for (int d = 0; d < head_dim; ++d) out[d] *= inv;
    for (size_t b = 0; b < block_w.size(); ++b) mass[b] += block_w[b] * inv;
}

namespace {

float* attention_scratch(size_t n) {
    thread_local std::vector<float> buf;
    if (buf.size() < n) buf.resize(n);
    return buf.data();
}

// Rows computed together in attend_batch: enough to read each K/V row once for a few tokens'
// worth of GQA heads, few enough that their scores (rows x n_kv floats) stay in L2.
constexpr int kTileRows = 16;
// Per-row cost on top of its n_kv positions when splitting work, in positions.
constexpr int64_t kRowOverhead = 32;

}  // namespace

void attend_paged_rows(std::span<const AttnRow> rows, const PagedKvView& kv, int head_dim,
                       float scale) {
    const AttendRowsFn fn = dispatch().attend_rows;
    if (!fn) {
        for (const AttnRow& r : rows)
            attend_paged_reference(r.q, kv, r.n_kv, head_dim, scale, r.out, r.kv_start, r.mass,
                                   r.tree_start, r.tree_mask);
        return;
    }
    for (size_t i = 0; i < rows.size(); i += kMaxAttendRows) {
        const int n = static_cast<int>(std::min<size_t>(kMaxAttendRows, rows.size() - i));
        int64_t nmax = 0;
        for (int r = 0; r < n; ++r) nmax = std::max(nmax, rows[i + r].n_kv);
        float* scratch = attention_scratch(attend_rows_scratch_floats(n, nmax, head_dim));
        fn(rows.data() + i, n, kv, head_dim, scale, scratch);
    }
}

void attend_paged(const float* q, const PagedKvView& kv, int64_t n_kv, int head_dim, float scale,
                  float* out) {
    const AttnRow row{q, out, n_kv};
    attend_paged_rows({&row, 1}, kv, head_dim, scale);
}

void attend_batch(const AttentionBatch& b, ThreadPool& pool) {
    if (b.n_tokens <= 0) return;
    const int group = b.n_head / b.n_head_kv;
    const int hd = b.head_dim;

    // Rows in (sequence, KV head, token, head) order, so that rows sharing keys and values are
    // neighbours and a contiguous share of them needs few tiles.
    struct Item {
        int64_t t;
        int h;
    };
    std::vector<Item> items;
    items.reserve(static_cast<size_t>(b.n_tokens * b.n_head));
    std::vector<int64_t> cost_before;  // cumulative cost of the items before each
    cost_before.reserve(items.capacity() + 1);
    int64_t total = 0;
    for (int64_t t0 = 0; t0 < b.n_tokens;) {
        int64_t t1 = t0 + 1;
        while (t1 < b.n_tokens && b.tok_seq[t1] == b.tok_seq[t0]) ++t1;
        for (int g = 0; g < b.n_head_kv; ++g)
            for (int64_t t = t0; t < t1; ++t)
                for (int h = g * group; h < (g + 1) * group; ++h) {
                    items.push_back({t, h});
                    cost_before.push_back(total);
                    total += b.tok_pos[t] + 1 + kRowOverhead;
                }
        t0 = t1;
    }

    // Shares of equal cost (causal prefill rows grow with the position): one per thread for a
    // few rows, four per thread for many, which keeps threads busy when one is slowed by another
    // process. Boundaries are rounded to whole tokens (items come in runs of `group`, so the
    // rounding never passes n_items): a token's query heads over one KV head stay in one tile,
    // which reads each key once per kRowGroup rows. (One decode token of TinyLlama's 32 heads
    // over 4 is 32 rows, four shares of 4 per thread: each group of 8 went to two shares, as 3 +
    // 1 rows in each. BM_DecodeAttentionGqa/group:8, 2 threads, A/B twice: 43.7 -> 39.0 us at
    // 512 positions, 170.8 -> 145.4 at 2048; AVX2 46.2 -> 41.7 and 183 -> 161; one thread
    // unchanged. The results are the same bits whatever the tiles.)
    const int64_t n_items = static_cast<int64_t>(items.size());
    const int threads = pool.size();
    const int64_t n_shares =
        std::min<int64_t>(n_items, n_items >= 16 * threads ? 4 * threads : threads);
    std::vector<int64_t> bound(n_shares + 1, n_items);
    for (int64_t k = 0; k < n_shares; ++k) {
        const int64_t at =
            std::lower_bound(cost_before.begin(), cost_before.end(), total * k / n_shares) -
            cost_before.begin();
        bound[k] = (at + group / 2) / group * group;
    }

    // Each sequence's first token in the batch, where any asks for H2O's mass (a token's rows
    // follow from it); a plain step builds nothing.
    std::vector<int64_t> first_of;
    if (std::any_of(b.seqs.begin(), b.seqs.end(), [](const SeqBlocks& s) { return s.mass; })) {
        first_of.assign(b.seqs.size(), -1);
        for (int64_t t = b.n_tokens - 1; t >= 0; --t)
            first_of[static_cast<size_t>(b.tok_seq[t])] = t;
    }

    auto run_share = [&](int64_t k) {
        AttnRow tile[kTileRows];
        int n = 0, seq = -1, g = -1;
        auto flush = [&] {
            if (n == 0) return;
            const PagedKvView view{
                b.seqs[seq].k,
                b.seqs[seq].v,
                b.block_size,
                b.layout.pos_stride,
                static_cast<size_t>(g) * b.layout.head_stride,
                b.layout.scale_offset,
                b.dtype,
                b.n_head_kv,
                g,
                b.k_channel_scales ? b.k_channel_scales + static_cast<size_t>(g) * hd : nullptr};
            attend_paged_rows({tile, static_cast<size_t>(n)}, view, hd, b.scale);
            n = 0;
        };
        for (int64_t i = bound[k]; i < bound[k + 1]; ++i) {
            const Item& it = items[i];
            const int s = b.tok_seq[it.t], gi = it.h / group;
            if (s != seq || gi != g || n == kTileRows) {
                flush();
                seq = s;
                g = gi;
            }
            const size_t off = (static_cast<size_t>(it.t) * b.n_head + it.h) * hd;
            const int64_t pos = b.tok_pos[it.t];
            const SeqBlocks& sb = b.seqs[static_cast<size_t>(s)];
            float* mass =
                sb.mass ? sb.mass + (static_cast<size_t>(it.t - first_of[static_cast<size_t>(s)]) *
                                         static_cast<size_t>(b.n_head) +
                                     static_cast<size_t>(it.h)) *
                                        static_cast<size_t>(sb.n_blocks)
                        : nullptr;
            const int64_t wpos = b.window_pos ? b.window_pos[it.t] : pos;
            tile[n++] = {b.q + off, b.out + off, pos + 1,
                         b.window > 0 ? std::max<int64_t>(0, wpos + 1 - b.window) : 0, mass};
            if (sb.tree) {
                tile[n - 1].tree_start = sb.tree_start;
                tile[n - 1].tree_mask = sb.tree[it.t - sb.first_token];
            }
        }
        flush();
    };
    if (n_shares == 1 || threads == 1) {
        for (int64_t k = 0; k < n_shares; ++k) run_share(k);
    } else {
        pool.run_tasks(n_shares, run_share);
    }
}

}  // namespace ferry::kernels::cpu
