#include <gtest/gtest.h>

#include <cmath>
#include <map>

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
