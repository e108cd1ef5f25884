#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "kernels/host_math.h"

namespace ferry::engine {

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.has_seed ? params.seed : std::random_device{}()) {}

std::unordered_map<int32_t, int> Sampler::penalty_counts(std::span<const int32_t> history) const {
    const SamplingParams& p = params_;
    std::unordered_map<int32_t, int> counts;
    if (!penalises()) return counts;
    const size_t window =
        p.penalty_last_n < 0 ? history.size() : std::min(history.size(), size_t(p.penalty_last_n));
    for (size_t i = history.size() - window; i < history.size(); ++i) ++counts[history[i]];
    return counts;
}

kernels::SampleRow Sampler::device_row(std::span<const int32_t> history,
                                       std::vector<kernels::LogitEdit>& edits) {
    const SamplingParams& p = params_;
    kernels::SampleRow r;
    r.temperature = p.greedy() ? 0.0f : p.temperature;
    r.top_k = p.top_k;
    r.top_p = p.top_p;
    r.min_p = p.min_p;
    r.repetition_penalty = p.repetition_penalty;
    r.presence_penalty = p.presence_penalty;
    r.frequency_penalty = p.frequency_penalty;
    r.first_edit = static_cast<int32_t>(edits.size());
    for (auto [id, bias] : p.logit_bias) edits.push_back({id, 0, bias});
    for (auto [id, count] : penalty_counts(history)) edits.push_back({id, count, 0.0f});
    r.n_edits = static_cast<int32_t>(edits.size()) - r.first_edit;
    if (!p.greedy()) r.u = uniform();
    return r;
}

std::span<const float> Sampler::adjusted(std::span<const float> logits,
                                         std::span<const int32_t> history,
                                         std::vector<float>& buf) const {
    const SamplingParams& p = params_;
    // Biases and penalties (CTRL-style repetition penalty; OpenAI-style presence / frequency)
    // change a copy; without them the logits are read where they are.
    std::span<const float> l = logits;
    if (!p.logit_bias.empty()) {
        buf.assign(logits.begin(), logits.end());
        for (auto [id, bias] : p.logit_bias)
            if (id >= 0 && size_t(id) < buf.size()) buf[id] += bias;
        l = buf;
    }
    const auto counts = penalty_counts(history);
    if (!counts.empty()) {
        if (l.data() != buf.data()) buf.assign(logits.begin(), logits.end());
        for (auto [id, count] : counts) {
            if (id < 0 || size_t(id) >= buf.size()) continue;
            float& v = buf[id];
            v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
            v -= p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
        }
        l = buf;
    }
    return l;
}

namespace {
// Which truncations can drop a token: candidates() and sample()'s shortcut decide alike.
bool top_k_cuts(const SamplingParams& p, size_t n_vocab) {
    return p.top_k > 0 && size_t(p.top_k) < n_vocab;
}
bool mass_cuts(const SamplingParams& p) {
    return p.top_p < 1.0f || p.min_p > 0.0f;
}

// Every token's probability at temperature t: one vector softmax over the vocabulary.
void softmax_at(std::span<const float> l, float t, std::vector<float>& prob) {
    prob.resize(l.size());
    const float inv = 1.0f / t;
    for (size_t i = 0; i < l.size(); ++i) prob[i] = l[i] * inv;
    kernels::softmax(prob.data(), static_cast<int64_t>(prob.size()));
}
}  // namespace

std::vector<Sampler::Candidate> Sampler::candidates(std::span<const float> logits,
                                                    std::span<const int32_t> history) const {
    const SamplingParams& p = params_;
    std::vector<float> buf;
    const std::span<const float> l = adjusted(logits, history, buf);
    const auto n_vocab = static_cast<int32_t>(l.size());
    // Best by logit, lowest id on ties: the order candidates come in.
    auto before = [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };

    if (p.greedy()) {
        const auto id = static_cast<int32_t>(kernels::argmax(l.data(), n_vocab));
        return {{id, l[id], 1.0f}};
    }

    std::vector<Candidate> c;
    // The mass top-p keeps, in the units of the candidates' p: the whole softmax's float sum is
    // 1 only to a few 1e-6, so without top-k the target is scaled by that sum, taken in double
    // (as a device sampling the same row normalises; kernels/sample_row.h).
    double top_p_mass = p.top_p;
    if (top_k_cuts(p, l.size())) {
        // The top k through a bounded heap (the worst kept on top) instead of sorting the
        // vocabulary, then their softmax at the temperature.
        const auto keep = static_cast<size_t>(p.top_k);
        std::vector<int32_t> best;
        best.reserve(keep + 1);
        for (int32_t i = 0; i < n_vocab; ++i) {
            if (best.size() < keep) {
                best.push_back(i);
                std::push_heap(best.begin(), best.end(), before);
            } else if (before(i, best.front())) {
                std::pop_heap(best.begin(), best.end(), before);
                best.back() = i;
                std::push_heap(best.begin(), best.end(), before);
            }
        }
        std::sort_heap(best.begin(), best.end(), before);
        c.resize(best.size());
        const float mx = l[best.front()];
        double sum = 0;
        for (size_t i = 0; i < best.size(); ++i) {
            c[i] = {best[i], l[best[i]], std::exp((l[best[i]] - mx) / p.temperature)};
            sum += c[i].p;
        }
        for (auto& x : c) x.p = static_cast<float>(x.p / sum);
    } else {
        // Every token is a candidate. Sorting 49152 of them per token cost more than the
        // forward pass, so only those that can survive top-p and min-p are sorted: a token
        // with p >= floor, for a floor lowered until the tokens above it hold top-p's mass
        // (the tokens above any floor are a prefix of the order, so the prefix top-p keeps
        // lies inside them).
        std::vector<float> prob;
        softmax_at(l, p.temperature, prob);
        const float pmax = prob[kernels::argmax(l.data(), n_vocab)];
        float floor = 0;
        if (p.top_p < 1.0f) {
            const auto n = static_cast<int64_t>(prob.size());
            top_p_mass = p.top_p * kernels::sum_double(prob.data(), n);
            for (float t = pmax / 16; t >= std::numeric_limits<float>::min(); t /= 16) {
                if (kernels::sum_double(prob.data(), n, t) >= top_p_mass) {
                    floor = t;
                    break;
                }
            }
        }
        if (p.min_p > 0.0f) floor = std::max(floor, p.min_p * pmax);
        std::vector<int32_t> ids;
        for (int32_t i = 0; i < n_vocab; ++i)
            if (prob[i] >= floor) ids.push_back(i);
        if (ids.empty()) ids.push_back(static_cast<int32_t>(kernels::argmax(l.data(), n_vocab)));
        // Untruncated, every token stays and the order decides nothing: they stay by id.
        if (mass_cuts(p)) std::sort(ids.begin(), ids.end(), before);
        c.resize(ids.size());
        for (size_t i = 0; i < ids.size(); ++i) c[i] = {ids[i], l[ids[i]], prob[ids[i]]};
    }

    // top-p: the smallest prefix whose mass reaches top_p.
    if (p.top_p < 1.0f) {
        double mass = 0;
        size_t n = 0;
        while (n < c.size() && mass < top_p_mass) mass += c[n++].p;
        c.resize(std::max<size_t>(1, n));
    }
    // min-p: drop candidates less likely than min_p times the most likely one.
    if (p.min_p > 0.0f) {
        const float floor = p.min_p * c.front().p;
        size_t n = 1;
        while (n < c.size() && c[n].p >= floor) ++n;
        c.resize(n);
    }
    double sum = 0;
    for (auto& x : c) sum += x.p;
    for (auto& x : c) x.p = static_cast<float>(x.p / sum);
    return c;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
    const SamplingParams& p = params_;
    if (p.greedy()) return candidates(logits, history).front().id;  // takes no number
    const bool untruncated = !top_k_cuts(p, logits.size()) && !mass_cuts(p);
    if (!untruncated) return draw(candidates(logits, history));
    // Plain sampling (OpenAI's defaults): a draw from the whole softmax needs no order, so
    // the tokens are walked by id. The same distribution as draw(candidates()), one pass.
    std::vector<float> buf, prob;
    const std::span<const float> l = adjusted(logits, history, buf);
    softmax_at(l, p.temperature, prob);
    // The draw against the probabilities' own sum in double: the float sum the softmax divided
    // by is 1 only to a few 1e-6, which would shift every boundary of the walk that much (a
    // device sampling the same row normalises in double; kernels/sample_row.h).
    const double r =
        uniform() * kernels::sum_double(prob.data(), static_cast<int64_t>(prob.size()));
    double acc = 0;
    int32_t last = -1;
    for (size_t i = 0; i < prob.size(); ++i) {
        // The vector exp gives -inf (a grammar's ban) ~1e-38, not 0: such a token is never the
        // one a walk that ran past the end falls back on.
        if (!(prob[i] > 0) || l[i] == -std::numeric_limits<float>::infinity()) continue;
        acc += prob[i];
        last = static_cast<int32_t>(i);
        if (r < acc) return last;
    }
    // Rounding left the sum just under r (or nothing had mass): the last token that has some.
    return last >= 0 ? last : static_cast<int32_t>(kernels::argmax(l.data(), int64_t(l.size())));
}

double Sampler::uniform() {
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
}

int32_t Sampler::draw(const std::vector<Candidate>& c) {
    double r = uniform(), acc = 0;
    for (const auto& x : c) {
        acc += x.p;
        if (r < acc) return x.id;
    }
    // Rounding left r past the end: the last candidate with mass (one of probability 0 may be
    // a token a grammar forbids).
    for (auto it = c.rbegin(); it != c.rend(); ++it)
        if (it->p > 0) return it->id;
    return c.front().id;
}

int32_t masked_argmax(const grammar::TokenMask& mask, const float* logits, int n_vocab) {
    int32_t best = -1;
    float best_logit = 0;
    const size_t words =
        std::min(mask.bits.size(), (static_cast<size_t>(n_vocab) + 63) / size_t{64});
    for (size_t w = 0; w < words; ++w) {
        const auto base = static_cast<int32_t>(w * 64);
        const int32_t end = std::min(n_vocab, base + 64);
        if (mask.bits[w] == ~uint64_t{0} && end == base + 64) {  // inside a string: most words
            const auto i = base + static_cast<int32_t>(kernels::argmax(logits + base, 64));
            if (best < 0 || logits[i] > best_logit) best = i, best_logit = logits[i];
            continue;
        }
        for (uint64_t bits = mask.bits[w]; bits; bits &= bits - 1) {
            const int32_t i = base + std::countr_zero(bits);
            if (i >= end) break;
            if (best < 0 || logits[i] > best_logit) best = i, best_logit = logits[i];
        }
    }
    return best;
}

float token_logprobs(std::span<const float> logits, int32_t token, int top_n,
                     std::vector<TokenLogprob>* top) {
    // The log-sum-exp from one vector softmax: p(top) = exp(l(top) - lse), so lse = l(top) -
    // log p(top), without a double-precision exp per vocabulary entry on the engine thread.
    const auto n_vocab = static_cast<int64_t>(logits.size());
    thread_local std::vector<float> prob;
    prob.assign(logits.begin(), logits.end());
    kernels::softmax(prob.data(), n_vocab);
    const int64_t best = kernels::argmax(logits.data(), n_vocab);
    const float lse = logits[best] - std::log(prob[best]);
    if (top) {
        std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
        for (int32_t i = 0; i < n_vocab; ++i) ids[i] = i;
        const auto k = static_cast<int64_t>(std::min<int64_t>(top_n, n_vocab));
        std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                          [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
        for (int64_t i = 0; i < k; ++i) top->push_back({ids[i], logits[ids[i]] - lse});
    }
    return logits[token] - lse;
}

}  // namespace ferry::engine
