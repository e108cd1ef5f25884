#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "kernels/kernels.h"

namespace ferry::engine {

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.has_seed ? params.seed : std::random_device{}()) {}

std::vector<Sampler::Candidate> Sampler::candidates(std::span<const float> logits,
                                                    std::span<const int32_t> history) const {
    const SamplingParams& p = params_;
    // Biases and penalties (CTRL-style repetition penalty; OpenAI-style presence / frequency)
    // change a copy; without them the logits are read where they are.
    std::span<const float> l = logits;
    std::vector<float> penalised;
    if (!p.logit_bias.empty()) {
        penalised.assign(logits.begin(), logits.end());
        for (auto [id, bias] : p.logit_bias)
            if (id >= 0 && size_t(id) < penalised.size()) penalised[id] += bias;
        l = penalised;
    }
    const bool penalise =
        p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    if (penalise && !history.empty()) {
        if (penalised.empty()) penalised.assign(logits.begin(), logits.end());
        const size_t window = p.penalty_last_n < 0
                                  ? history.size()
                                  : std::min(history.size(), size_t(p.penalty_last_n));
        std::unordered_map<int32_t, int> counts;
        for (size_t i = history.size() - window; i < history.size(); ++i) ++counts[history[i]];
        for (auto [id, count] : counts) {
            if (id < 0 || size_t(id) >= penalised.size()) continue;
            float& v = penalised[id];
            v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
            v -= p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
        }
        l = penalised;
    }

    // The `keep` best by logit (lowest id on ties), best first: greedy and top-k decoding pick
    // from 49152 logits per token, once per sequence per step. Greedy takes the vector argmax
    // kernel; top-k a bounded heap (the worst kept on top) instead of sorting the vocabulary.
    const auto n_vocab = static_cast<int32_t>(l.size());
    auto before = [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
    size_t keep = l.size();
    if (p.greedy())
        keep = 1;
    else if (p.top_k > 0)
        keep = std::min(keep, size_t(p.top_k));
    std::vector<int32_t> best;
    if (keep == 1) {
        best.push_back(static_cast<int32_t>(kernels::argmax(l.data(), n_vocab)));
    } else if (keep == l.size()) {
        best.resize(l.size());
        for (int32_t i = 0; i < n_vocab; ++i) best[i] = i;
        std::sort(best.begin(), best.end(), before);
    } else {
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
    }
    std::vector<Candidate> c(best.size());
    for (size_t i = 0; i < best.size(); ++i) c[i] = {best[i], l[best[i]], 0.0f};

    // Softmax at the temperature (greedy keeps one candidate at p = 1).
    const float temp = p.greedy() ? 1.0f : p.temperature;
    const float mx = c.front().logit;
    double sum = 0;
    for (auto& x : c) sum += (x.p = std::exp((x.logit - mx) / temp));
    for (auto& x : c) x.p = static_cast<float>(x.p / sum);

    // top-p: the smallest prefix whose mass reaches top_p.
    if (p.top_p < 1.0f) {
        double mass = 0;
        size_t n = 0;
        while (n < c.size() && mass < p.top_p) mass += c[n++].p;
        c.resize(std::max<size_t>(1, n));
    }
    // min-p: drop candidates less likely than min_p times the most likely one.
    if (p.min_p > 0.0f) {
        const float floor = p.min_p * c.front().p;
        size_t n = 1;
        while (n < c.size() && c[n].p >= floor) ++n;
        c.resize(n);
    }
    sum = 0;
    for (auto& x : c) sum += x.p;
    for (auto& x : c) x.p = static_cast<float>(x.p / sum);
    return c;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
    return draw(candidates(logits, history));
}

double Sampler::uniform() {
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
}

int32_t Sampler::draw(const std::vector<Candidate>& c) {
    if (c.size() == 1) return c.front().id;
    double r = uniform(), acc = 0;
    for (const auto& x : c) {
        acc += x.p;
        if (r < acc) return x.id;
    }
    return c.back().id;
}

}  // namespace ferry::engine
