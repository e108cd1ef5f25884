#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "engine/sampler.h"

using ferry::engine::Sampler;
using ferry::engine::SamplingParams;

namespace {
std::vector<float> logits_of(std::initializer_list<float> l) {
    return l;
}

SamplingParams plain(float temp) {
    SamplingParams p;
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 7;
    p.has_seed = true;
    return p;
}
}  // namespace

TEST(Sampler, GreedyPicksArgmaxAndLowestIndexOnTies) {
    Sampler s(plain(0.0f));
    EXPECT_EQ(s.sample(logits_of({0.1f, 2.0f, -1.0f, 1.9f}), {}), 1);
    EXPECT_EQ(s.sample(logits_of({3.0f, 1.0f, 3.0f}), {}), 0);
}

TEST(Sampler, SameSeedSameSequence) {
    std::vector<float> l(100);
    for (int i = 0; i < 100; ++i) l[i] = std::sin(i * 0.7f);
    Sampler a(plain(1.0f)), b(plain(1.0f));
    std::vector<int> ra, rb;
    for (int i = 0; i < 50; ++i) ra.push_back(a.sample(l, {})), rb.push_back(b.sample(l, {}));
    EXPECT_EQ(ra, rb);
    auto p = plain(1.0f);
    p.seed = 8;
    Sampler c(p);
    std::vector<int> rc;
    for (int i = 0; i < 50; ++i) rc.push_back(c.sample(l, {}));
    EXPECT_NE(ra, rc);
}

TEST(Sampler, TemperatureOneMatchesSoftmaxFrequencies) {
    const auto l = logits_of({0.0f, 1.0f, 2.0f});
    Sampler s(plain(1.0f));
    std::map<int, int> counts;
    const int n = 30000;
    for (int i = 0; i < n; ++i) ++counts[s.sample(l, {})];
    const double z = 1 + std::exp(1.0) + std::exp(2.0);
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(counts[k] / double(n), std::exp(double(k)) / z, 0.012);
}

TEST(Sampler, TopKTopPMinPTruncate) {
    const auto l = logits_of({5.0f, 4.0f, 3.0f, 0.0f, -2.0f});
    auto p = plain(1.0f);
    p.top_k = 2;
    EXPECT_EQ(Sampler(p).candidates(l, {}).size(), 2u);
    p = plain(1.0f);
    p.top_p = 0.5f;  // token 0 alone has p ~ 0.66
    EXPECT_EQ(Sampler(p).candidates(l, {}).size(), 1u);
    p = plain(1.0f);
    p.min_p = 0.2f;  // keeps tokens with p >= 0.2 * p(top): e^-1 = 0.37 and e^-2 = 0.135
    auto c = Sampler(p).candidates(l, {});
    ASSERT_EQ(c.size(), 2u);
    EXPECT_NEAR(c[0].p + c[1].p, 1.0f, 1e-6);
}

TEST(Sampler, RepetitionPenaltyDemotesSeenTokens) {
    const auto l = logits_of({2.0f, 1.9f});
    auto p = plain(0.0f);
    p.repetition_penalty = 1.5f;
    const std::vector<int32_t> history = {0};
    EXPECT_EQ(Sampler(p).sample(l, history), 1);  // 2.0 / 1.5 < 1.9
    p.repetition_penalty = 1.0f;
    EXPECT_EQ(Sampler(p).sample(l, history), 0);
}

TEST(Sampler, FrequencyPenaltyScalesWithCount) {
    const auto l = logits_of({2.0f, 1.0f});
    auto p = plain(0.0f);
    p.frequency_penalty = 0.4f;
    const std::vector<int32_t> twice = {0, 0}, thrice = {0, 0, 0};
    EXPECT_EQ(Sampler(p).sample(l, twice), 0);   // 2.0 - 0.8 = 1.2 > 1.0
    EXPECT_EQ(Sampler(p).sample(l, thrice), 1);  // 2.0 - 1.2 = 0.8 < 1.0
}

TEST(Sampler, LogitBiasBansAndForcesAndStacksWithPenalties) {
    const auto l = logits_of({2.0f, 1.9f, 0.0f});
    auto p = plain(0.0f);
    p.logit_bias = {{0, -100.0f}};
    EXPECT_EQ(Sampler(p).sample(l, {}), 1);  // the best token banned
    p.logit_bias = {{2, 100.0f}};
    EXPECT_EQ(Sampler(p).sample(l, {}), 2);  // the worst one forced
    // Sampled, a banned token never comes out; the others keep their relative odds.
    auto t = plain(1.0f);
    t.logit_bias = {{0, -100.0f}, {99, 5.0f}};  // ids outside the vocabulary are ignored
    Sampler s(t);
    for (int i = 0; i < 200; ++i) EXPECT_NE(s.sample(l, {}), 0);
    // The bias is applied before the penalty: 2.0 + 0.5 = 2.5, / 1.5 = 1.67 < 1.9.
    p.logit_bias = {{0, 0.5f}};
    p.repetition_penalty = 1.5f;
    const std::vector<int32_t> history = {0};
    EXPECT_EQ(Sampler(p).sample(l, history), 1);
}

// With top-k off, top-p and min-p select from the whole vocabulary without sorting it; the
// kept tokens, their order and probabilities must be those of a plain sort in double.
TEST(Sampler, FullVocabularyTruncationMatchesASortedReference) {
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> l(5000);
    for (float& x : l) x = nd(rng);
    l[17] = l[4000];  // a tie: the lower id first
    for (float t : {0.7f, 1.0f, 1.5f})
        for (float top_p : {1.0f, 0.5f, 0.9f, 0.99f})
            for (float min_p : {0.0f, 0.05f}) {
                std::vector<double> p(l.size());
                double z = 0;
                for (size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp(double(l[i]) / t);
                for (double& x : p) x /= z;
                std::vector<int32_t> order(l.size());
                for (size_t i = 0; i < l.size(); ++i) order[i] = int32_t(i);
                std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
                    return l[a] > l[b] || (l[a] == l[b] && a < b);
                });
                size_t n = 0;
                double mass = 0;
                while (n < order.size() && (top_p >= 1.0f || mass < top_p)) mass += p[order[n++]];
                size_t m = 1;
                while (m < n && p[order[m]] >= min_p * p[order[0]]) ++m;
                if (min_p > 0) n = m;

                auto sp = plain(t);
                sp.top_p = top_p;
                sp.min_p = min_p;
                const auto c = Sampler(sp).candidates(l, {});
                // Float against double rounding may move a cut that falls within ~1e-6 of
                // the mass by one token; the order and the values must agree.
                ASSERT_LE(std::abs(double(c.size()) - double(n)), 1.0)
                    << "t " << t << " top_p " << top_p << " min_p " << min_p;
                if (top_p >= 1.0f && min_p == 0.0f) {
                    // Nothing truncated: every token, in id order.
                    ASSERT_EQ(c.size(), l.size());
                    for (size_t i = 0; i < c.size(); ++i) {
                        ASSERT_EQ(c[i].id, int32_t(i));
                        ASSERT_NEAR(c[i].p, p[i], 1e-5 + 1e-4 * p[i]);
                    }
                    continue;
                }
                double kept = 0;
                for (size_t i = 0; i < std::min(c.size(), n); ++i) kept += p[order[i]];
                for (size_t i = 0; i < std::min(c.size(), n); ++i) {
                    ASSERT_EQ(c[i].id, order[i]) << i;
                    ASSERT_NEAR(c[i].p, p[order[i]] / kept, 1e-5 + 1e-4 * p[order[i]] / kept);
                }
            }
}

// Plain sampling draws by id instead of through sorted candidates: the frequencies must
// still be the softmax of the adjusted logits (here a repetition penalty, at t = 0.5).
TEST(Sampler, UntruncatedDrawsFollowTheAdjustedSoftmax) {
    const auto l = logits_of({0.0f, 1.0f, 2.0f, -30.0f});
    auto p = plain(0.5f);
    p.repetition_penalty = 1.5f;
    Sampler s(p);
    const std::vector<int32_t> history = {2};
    std::map<int, int> counts;
    const int n = 30000;
    for (int i = 0; i < n; ++i) ++counts[s.sample(l, history)];
    const double adj[] = {0.0, 1.0, 2.0 / 1.5};
    double z = 0;
    for (double a : adj) z += std::exp(a / 0.5);
    for (int k = 0; k < 3; ++k)
        EXPECT_NEAR(counts[k] / double(n), std::exp(adj[k] / 0.5) / z, 0.012) << k;
    EXPECT_EQ(counts[3], 0);
}
