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
//   seeded draw repeats).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/host_device.h"

namespace ferry::kernels {

// One row's draw, as engine::SamplingParams asks for it.
struct SampleRow {
    float temperature = 0;  // <= 0: greedy (also top_k == 1)
    int32_t top_k = 0;      // <= 0 or >= n_vocab: off
    float top_p = 1;        // >= 1: off
    float min_p = 0;        // <= 0: off
    float repetition_penalty = 1;
    float presence_penalty = 0;
    float frequency_penalty = 0;
    double u = 0;  // uniform in [0, 1) from the sequence's generator; unused when greedy
    int32_t first_edit = 0, n_edits = 0;  // the row's slice of the step's edits
};

// A change to one logit before the draw, applied in order: count == 0 adds bias (OpenAI's
// logit_bias), count > 0 applies the penalties for a token seen count times in the window.
struct LogitEdit {
    int32_t id = 0;
    int32_t count = 0;
    float bias = 0;
};

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
        for (int b = 0; b < 16; ++b) w[b] = 0, c[b] = 0;
        for (int i = g.rank(); i < n; i += g.size()) {
            const uint64_t k = key(i);
            if ((k & mask) != prefix || !in(i)) continue;  // the cheap test first
            const int d = static_cast<int>(k >> shift) & 15;
            const double wi = weight(i);
            // Every bucket updated with a predicate rather than w[d]: registers, not a stack
            // array indexed at run time, on a GPU.
            for (int b = 0; b < 16; ++b) {
                w[b] += d == b ? wi : 0.0;
                c[b] += d == b;
            }
        }
        g.sum(w, c);
        int chosen = -1, chosen_count = 0;
        for (int d = 15; d >= 0; --d) {
            if (c[d] == 0) continue;
            const double reach = before + w[d];
            if (strict ? reach > x : reach >= x) {
                chosen = d;
                chosen_count = c[d];
                break;
            }
            before = reach;
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

// top-p, min-p and the draw over a prefix `in` of the value order whose tokens have
// probabilities p(i) (Sampler::candidates from its truncations on).
template <class G, class P, class In>
FERRY_HD int32_t truncate_and_draw(G& g, const float* l, int n, const SampleRow& r, P p, In in) {
    auto key = [&](int i) { return value_key(l[i], i); };
    auto one = [](int) { return 1.0; };
    auto mass = [&](int i) { return double(p(i)); };
    // top-p: the shortest prefix whose mass reaches top_p (all of it if rounding falls short).
    uint64_t cut = 0;
    if (r.top_p < 1.0f) {
        uint64_t k = 0;
        if (select(g, n, kValueTopShift, key, mass, in, r.top_p, false, &k)) cut = k;
    }
    auto in1 = [&](int i) { return in(i) && key(i) >= cut; };
    // min-p: tokens less likely than min_p times the first are dropped; the first always stays.
    uint64_t first = 0;
    for (int i = g.rank(); i < n; i += g.size())
        if (in1(i) && key(i) > first) first = key(i);
    first = g.max(first);
    const float floor = r.min_p > 0.0f ? exact::mul(r.min_p, p(key_id(first))) : 0.0f;
    auto in2 = [&](int i) { return in1(i) && (p(i) >= floor || key(i) == first); };
    // The draw from the renormalised survivors; past the end (rounding), the last of them.
    const double s = total(g, n, [&](int i) { return in2(i) ? double(p(i)) : 0.0; });
    auto q = [&](int i) { return double(static_cast<float>(double(p(i)) / s)); };
    uint64_t k = first;  // the fallback's answer should every select fall short
    if (select(g, n, kValueTopShift, key, q, in2, r.u, true, &k)) return key_id(k);
    const double kept = total(g, n, [&](int i) { return in2(i) ? 1.0 : 0.0; });
    select(g, n, kValueTopShift, key, one, in2, kept, false, &k);
    return key_id(k);
}

// The token row r picks from logits l (n of them, its edits already applied).
template <class G>
FERRY_HD int32_t sample_row(G& g, const float* l, int n, const SampleRow& r) {
    auto all = [](int) { return true; };
    auto one = [](int) { return 1.0; };
    auto key = [&](int i) { return value_key(l[i], i); };
    uint64_t k = 0;
    if (greedy(r)) {
        select(g, n, kValueTopShift, key, one, all, 1.0, false, &k);
        return key_id(k);
    }
    float mx = -INFINITY;
    for (int i = g.rank(); i < n; i += g.size()) mx = l[i] > mx ? l[i] : mx;
    mx = g.max(mx);

    if (r.top_k > 0 && r.top_k < n) {
        // The top k, then their softmax at the temperature.
        select(g, n, kValueTopShift, key, one, all, double(r.top_k), false, &k);
        const uint64_t kth = k;
        auto in = [&](int i) { return key(i) >= kth; };
        auto e = [&](int i) { return exp_f(exact::div(exact::sub(l[i], mx), r.temperature)); };
        const double s = total(g, n, [&](int i) { return in(i) ? double(e(i)) : 0.0; });
        auto p = [&](int i) { return static_cast<float>(double(e(i)) / s); };
        return truncate_and_draw(g, l, n, r, p, in);
    }

    // The whole vocabulary's softmax at the temperature (Sampler's softmax_at).
    const float inv = exact::div(1.0f, r.temperature);
    const float top = exact::mul(mx, inv);
    auto e = [&](int i) { return exp_f(exact::sub(exact::mul(l[i], inv), top)); };
    const double z = total(g, n, [&](int i) { return double(e(i)); });
    auto p = [&](int i) { return static_cast<float>(double(e(i)) / z); };
    if (r.top_p < 1.0f || r.min_p > 0.0f) return truncate_and_draw(g, l, n, r, p, all);

    // Untruncated: the draw walks the tokens by id; past the end, the last token with mass.
    auto mass = [&](int i) { return double(p(i)); };
    auto by_id = [](int i) { return id_key(i); };
    const int top_shift = id_top_shift(n);
    if (select(g, n, top_shift, by_id, mass, all, r.u, true, &k)) return key_id(k);
    auto has_mass = [&](int i) { return p(i) > 0; };
    const double n_mass = total(g, n, [&](int i) { return has_mass(i) ? 1.0 : 0.0; });
    if (n_mass > 0 && select(g, n, top_shift, by_id, one, has_mass, n_mass, false, &k))
        return key_id(k);
    select(g, n, kValueTopShift, key, one, all, 1.0, false, &k);
    return key_id(k);
}

// The group of one host thread.
struct OneThread {
    int rank() const { return 0; }
    int size() const { return 1; }
    void sum(double (&)[16], int (&)[16]) const {}
    double sum(double v) const { return v; }
    float max(float v) const { return v; }
    uint64_t max(uint64_t v) const { return v; }
};

}  // namespace sample
}  // namespace ferry::kernels
