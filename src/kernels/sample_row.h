// A token drawn from a logits row where the row lives, so a step sends the host token ids, not
// rows x n_vocab floats. engine::Sampler is the definition: penalties and biases on the raw
// logits, then top-k, temperature, top-p, min-p, and an inverse-CDF draw with a uniform number
// the host takes from the sequence's own seeded generator. Here the same choice is made without
// sorting the vocabulary, so it can run on a GPU block as well as on one host thread:
//
//   Every token has an order key, larger first: (its logit's order-preserving bits, then its id
//   inverted), the order Sampler sorts candidates in (best logit first, lowest id on ties). Each
//   truncation keeps a prefix of that order, and the draw lands on a position in it, so each is
//   "the first position where the weight summed from the front reaches x" (a count for top-k,
//   the probability mass for top-p and the draw). A radix walk finds it from the high digit
//   down: per 4-bit digit, one pass sums each bucket's weight among the tokens that share the
//   digits found so far, and the bucket where the sum reaches x is the next digit. A bucket
//   left with one token ends the walk early, which for distinct logits is a few passes.
//   Once a truncation has narrowed the candidates to kListCap or fewer (top-k, or the floor
//   below which no token survives top-p and min-p), they are compacted into a list the later
//   passes read instead of the vocabulary.
//
// Sums run in a different order from Sampler's sequential ones, and where the whole vocabulary's
// softmax is taken (no top-k) the host's is the SIMD kernel's (its own exp, a float sum) where
// this one sums exp in double: probabilities agree to about 1e-6 relative, so the two pick the
// same token except where u, top-p or min-p falls that close to a boundary (after top-k both
// sides compute alike, and a draw differs only at float rounding).
// The code is written once for both sides against a group G of threads that share a row:
//   rank(), size(): this thread's place among them;
//   sum(double (&)[16], int (&)[16]), sum(double), max(float), max(uint64_t): every thread's
//   values combined, the result in every thread, in an order fixed by the group's shape (so a
//   seeded draw repeats);
//   scan(int v, int* total): the sum of v over the threads before this one, and over all;
//   list_l(), list_id(): kListCap candidates' room, shared by the group; sync(): a barrier.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/host_device.h"
#include "kernels/sample_args.h"

namespace ferry::kernels {

namespace sample {

FERRY_HD float exp_f(float x) {
#if defined(__CUDA_ARCH__)
    return expf(x);
#else
    return std::exp(x);
#endif
}

FERRY_HD bool greedy(const SampleRow& p) {
    return p.temperature <= 0 || p.top_k == 1;
}

// Biases, then penalties, on the row in place (Sampler::adjusted, formula for formula).
FERRY_HD void apply_edits(float* l, int n, const SampleRow& p, const LogitEdit* edits) {
    for (int j = 0; j < p.n_edits; ++j) {
        const LogitEdit& e = edits[p.first_edit + j];
        if (e.id < 0 || e.id >= n) continue;
        float v = l[e.id];
        if (e.count == 0) {
            v = exact::add(v, e.bias);
        } else {
            v = v > 0 ? exact::div(v, p.repetition_penalty) : exact::mul(v, p.repetition_penalty);
            v = exact::sub(
                v, exact::add(p.presence_penalty, exact::mul(p.frequency_penalty, float(e.count))));
        }
        l[e.id] = v;
    }
}

// A float's bits as an unsigned number in the float's own order (-0 taken as +0, which compare
// equal as floats and so tie by id); NaN last, as the host's argmax never picks it.
FERRY_HD uint32_t order_bits(float x) {
    if (x != x) return 0;
    x = x + 0.0f;
    uint32_t u;
#if defined(__CUDA_ARCH__)
    u = __float_as_uint(x);
#else
    std::memcpy(&u, &x, 4);
#endif
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// Larger first: the better logit, then the lower id.
FERRY_HD uint64_t value_key(float l, int i) {
    return uint64_t{order_bits(l)} << 32 | uint32_t(~uint32_t(i));
}
// Larger first: the lower id (the untruncated draw walks the vocabulary by id).
FERRY_HD uint64_t id_key(int i) {
    return uint32_t(~uint32_t(i));
}
FERRY_HD int32_t key_id(uint64_t k) {
    return static_cast<int32_t>(~uint32_t(k));
}
// The shift of the highest digit in which ids below n differ (bits above it are 1 in every
// id_key), so an id walk skips the digits that cannot split anything.
FERRY_HD int id_top_shift(int n) {
    int hb = 0;
    for (uint32_t v = n > 1 ? uint32_t(n - 1) : 0u; v > 1; v >>= 1) ++hb;
    return hb / 4 * 4;
}
constexpr int kValueTopShift = 60;

// Among the tokens i < n with in(i), ordered by key(i) (larger first): the key of the first
// position where the weights summed from the front reach x (>= x, or > x when strict). false:
// the whole set falls short of x.
template <class G, class Key, class Weight, class In>
FERRY_HD bool select(G& g, int n, int top_shift, Key key, Weight weight, In in, double x,
                     bool strict, uint64_t* out) {
    uint64_t prefix = 0, mask = 0;
    double before = 0;  // the weight of the tokens ahead of every bucket still open
    for (int shift = top_shift; shift >= 0; shift -= 4) {
        double w[16];
        int c[16];
        FERRY_UNROLL
        for (int b = 0; b < 16; ++b) w[b] = 0, c[b] = 0;
        for (int i = g.rank(); i < n; i += g.size()) {
            const uint64_t k = key(i);
            if ((k & mask) != prefix || !in(i)) continue;  // the cheap test first
            const int d = static_cast<int>(k >> shift) & 15;
            const double wi = weight(i);
            // Every bucket updated with a predicate rather than w[d]: registers, not a stack
            // array indexed at run time, on a GPU.
            FERRY_UNROLL
            for (int b = 0; b < 16; ++b) {
                w[b] += d == b ? wi : 0.0;
                c[b] += d == b;
            }
        }
        g.sum(w, c);
        int chosen = -1, chosen_count = 0;
        bool done = false;
        FERRY_UNROLL
        for (int d = 15; d >= 0; --d) {  // no break: the unrolled loop keeps w, c in registers
            if (done || c[d] == 0) continue;
            const double reach = before + w[d];
            if (strict ? reach > x : reach >= x) {
                chosen = d;
                chosen_count = c[d];
                done = true;
            } else {
                before = reach;
            }
        }
        if (chosen < 0) return false;
        prefix |= uint64_t(chosen) << shift;
        mask |= uint64_t{15} << shift;
        // One token left, or every digit walked: the position is the one token whose key has
        // the digits found (an id walk starts below bits that every key has set, so the key is
        // read back rather than assembled from the digits).
        if (chosen_count == 1 || shift == 0) {
            uint64_t found = 0;
            for (int i = g.rank(); i < n; i += g.size()) {
                const uint64_t k = key(i);
                if ((k & mask) == prefix && in(i)) found = k;
            }
            *out = g.max(found);
            return true;
        }
    }
    return false;  // top_shift < 0: nothing to walk
}

template <class G, class F>
FERRY_HD double total(G& g, int n, F f) {
    double s = 0;
    for (int i = g.rank(); i < n; i += g.size()) s += f(i);
    return g.sum(s);
}

// The last token with in(i) in the order key (the fallback of a draw that rounding carried past
// the end); false: none.
template <class G, class Key, class In>
FERRY_HD bool last_of(G& g, int n, int top_shift, Key key, In in, uint64_t* out) {
    const double count = total(g, n, [&](int i) { return in(i) ? 1.0 : 0.0; });
    return count > 0 && select(
                            g, n, top_shift, key, [](int) { return 1.0; }, in, count, false, out);
}

// The candidates a walk runs over: the row's positions (id null: position i is token i), or a
// list compacted out of it (token id[i] with logit l[i]), which later passes read instead of
// the whole vocabulary.
struct Cands {
    const float* l;
    const int32_t* id;
    int n;
    FERRY_HD int token(int i) const { return id ? id[i] : i; }
    FERRY_HD uint64_t key(int i) const { return value_key(l[i], token(i)); }
};

// At most this many candidates are compacted into the group's list (a block's shared memory on
// a GPU); a larger set is walked in place.
constexpr int kListCap = 1024;

// The row's tokens with in(i) as a list when they fit the group's, else the row itself.
template <class G, class In>
FERRY_HD Cands compact(G& g, const float* l, int n, In in) {
    int mine = 0;
    for (int i = g.rank(); i < n; i += g.size()) mine += in(i) ? 1 : 0;
    int count = 0;
    int at = g.scan(mine, &count);
    if (count > kListCap) return {l, nullptr, n};
    float* out_l = g.list_l();
    int32_t* out_id = g.list_id();
    for (int i = g.rank(); i < n; i += g.size())
        if (in(i)) out_l[at] = l[i], out_id[at] = i, ++at;
    g.sync();
    return {out_l, out_id, count};
}

// top-p, min-p and the draw over the candidates `in` of c, a prefix of the value order whose
// tokens have probabilities p(i) (Sampler::candidates from its truncations on).
template <class G, class P, class In>
FERRY_HD int32_t truncate_and_draw(G& g, const Cands& c, const SampleRow& r, P p, In in) {
    const int n = c.n;
    auto key = [&](int i) { return c.key(i); };
    auto mass = [&](int i) { return double(p(i)); };
    // top-p: the shortest prefix whose mass reaches top_p (all of it if rounding falls short).
    uint64_t cut = 0;
    if (r.top_p < 1.0f) {
        uint64_t k = 0;
        if (select(g, n, kValueTopShift, key, mass, in, r.top_p, false, &k)) cut = k;
    }
    auto in1 = [&](int i) { return key(i) >= cut && in(i); };
    // min-p: tokens less likely than min_p times the first are dropped; the first always stays.
    uint64_t first = 0;
    int first_at = -1;
    for (int i = g.rank(); i < n; i += g.size())
        if (in1(i) && key(i) > first) first = key(i), first_at = i;
    const uint64_t best = g.max(first);
    // Its probability from the thread that holds it (the others hold less, or nothing).
    const float p_first = g.max(first == best && first_at >= 0 ? p(first_at) : 0.0f);
    first = best;
    const float floor = r.min_p > 0.0f ? exact::mul(r.min_p, p_first) : 0.0f;
    auto in2 = [&](int i) { return in1(i) && (p(i) >= floor || key(i) == first); };
    // The draw from the renormalised survivors; past the end (rounding), the last of them.
    const double s = total(g, n, [&](int i) { return in2(i) ? double(p(i)) : 0.0; });
    // No mass to draw from (an infinite or NaN logit made the softmax NaN): the first.
    if (!(s > 0)) return key_id(first);
    auto q = [&](int i) { return double(static_cast<float>(double(p(i)) / s)); };
    uint64_t k = first;  // the fallback's answer should every select fall short
    if (select(g, n, kValueTopShift, key, q, in2, r.u, true, &k)) return key_id(k);
    // Rounding left u past the end: the last survivor with mass (never a token of probability
    // 0, which a grammar's mask may have forbidden).
    last_of(
        g, n, kValueTopShift, key, [&](int i) { return in2(i) && q(i) > 0; }, &k);
    return key_id(k);
}

// The token row r picks from logits l (n of them, its edits already applied).
template <class G>
FERRY_HD int32_t sample_row(G& g, const float* l, int n, const SampleRow& r) {
    auto all = [](int) { return true; };
    auto one = [](int) { return 1.0; };
    auto key = [&](int i) { return value_key(l[i], i); };
    uint64_t k = 0;
    // The most likely token (the lowest id on ties; NaN last).
    auto argmax = [&] {
        select(g, n, kValueTopShift, key, one, all, 1.0, false, &k);
        return key_id(k);
    };
    if (greedy(r)) return argmax();
    float mx = -INFINITY;
    for (int i = g.rank(); i < n; i += g.size()) mx = l[i] > mx ? l[i] : mx;
    mx = g.max(mx);

    if (r.top_k > 0 && r.top_k < n) {
        // The top k (as a list when they fit), then their softmax at the temperature.
        select(g, n, kValueTopShift, key, one, all, double(r.top_k), false, &k);
        const uint64_t kth = k;
        const Cands c = compact(g, l, n, [&](int i) { return key(i) >= kth; });
        auto in = [&](int i) { return c.id != nullptr || c.key(i) >= kth; };
        auto e = [&](int i) { return exp_f(exact::div(exact::sub(c.l[i], mx), r.temperature)); };
        const double s = total(g, c.n, [&](int i) { return in(i) ? double(e(i)) : 0.0; });
        auto p = [&](int i) { return static_cast<float>(double(e(i)) / s); };
        return truncate_and_draw(g, c, r, p, in);
    }

    // The whole vocabulary's softmax at the temperature (Sampler's softmax_at).
    const float inv = exact::div(1.0f, r.temperature);
    const float top = exact::mul(mx, inv);
    auto e_at = [&](const float* ls, int i) {
        return exp_f(exact::sub(exact::mul(ls[i], inv), top));
    };
    const double z = total(g, n, [&](int i) { return double(e_at(l, i)); });
    auto p_row = [&](int i) { return static_cast<float>(double(e_at(l, i)) / z); };
    if (r.top_p < 1.0f || r.min_p > 0.0f) {
        // Only tokens above a floor can survive, as the host's sampler reasons: min-p's (the
        // first token is the most likely), and one low enough that the tokens above it hold
        // top-p's mass (those tokens are a prefix of the order, so top-p's prefix lies inside).
        const float pmax = static_cast<float>(1.0 / z);  // the most likely token's: exp(0) / z
        float floor = 0;
        if (r.top_p < 1.0f) {
            for (float t = pmax / 16; t >= FLT_MIN; t /= 16) {
                const double m = total(g, n, [&](int i) {
                    const float pi = p_row(i);
                    return pi >= t ? double(pi) : 0.0;
                });
                if (m >= r.top_p) {
                    floor = t;
                    break;
                }
            }
        }
        if (r.min_p > 0.0f) {
            const float fm = exact::mul(r.min_p, pmax);
            floor = fm > floor ? fm : floor;
        }
        if (floor > pmax) floor = pmax;  // min_p > 1: the first still stays
        const Cands c = compact(g, l, n, [&](int i) { return p_row(i) >= floor; });
        if (c.n == 0) return argmax();  // nothing above any floor: a NaN softmax, as the host
        auto p = [&](int i) { return static_cast<float>(double(e_at(c.l, i)) / z); };
        auto in = [&](int i) { return c.id != nullptr || p(i) >= floor; };
        return truncate_and_draw(g, c, r, p, in);
    }

    // Untruncated: the draw walks the tokens by id; past the end, the last token with mass.
    auto mass = [&](int i) { return double(p_row(i)); };
    auto by_id = [](int i) { return id_key(i); };
    const int top_shift = id_top_shift(n);
    if (select(g, n, top_shift, by_id, mass, all, r.u, true, &k) ||
        last_of(
            g, n, top_shift, by_id, [&](int i) { return p_row(i) > 0; }, &k))
        return key_id(k);
    return argmax();
}

// The whole of a row's pick: its edits in order (one thread), its mask (every thread), then the
// draw; -1 when the mask allows nothing. The row is left edited.
template <class G>
FERRY_HD int32_t draw_row(G& g, float* l, int n, const SampleRow& r, const LogitEdit* edits,
                          const uint64_t* masks) {
    if (g.rank() == 0) apply_edits(l, n, r, edits);
    g.sync();
    if (r.mask_at >= 0) {
        const uint64_t* m = masks + r.mask_at;
        double allowed = 0;
        for (int i = g.rank(); i < n; i += g.size()) {
            if ((m[i >> 6] >> (i & 63)) & 1)
                allowed += 1;
            else
                l[i] = -INFINITY;
        }
        if (g.sum(allowed) == 0) return -1;  // the sum's barrier also publishes the writes
    }
    return sample_row(g, l, n, r);
}

// The group of one host thread, with its own list.
struct OneThread {
    float list_l_[kListCap];
    int32_t list_id_[kListCap];

    int rank() const { return 0; }
    int size() const { return 1; }
    void sync() const {}
    int scan(int v, int* total) const {
        *total = v;
        return 0;
    }
    void sum(double (&)[16], int (&)[16]) const {}
    double sum(double v) const { return v; }
    float max(float v) const { return v; }
    uint64_t max(uint64_t v) const { return v; }
    float* list_l() { return list_l_; }
    int32_t* list_id() { return list_id_; }
};

}  // namespace sample
}  // namespace ferry::kernels
