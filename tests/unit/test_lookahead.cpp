// Lookahead's proposer on its own: the Jacobi guesses are the target's predictions past the
// accepted prefix, at the positions they were made for; refined guesses become pool n-grams;
// each source is judged against the tokens that follow, verified or not. (That its output is
// the target's exactly is tested with the other proposers in test_speculation.cpp.)
#include <gtest/gtest.h>

#include <vector>

#include "engine/lookahead_proposer.h"

using namespace ferry::engine;

namespace {

constexpr int V = 10;

// Logits rows whose argmaxes are `top`.
std::vector<float> rows_with_argmax(const std::vector<int32_t>& top) {
    std::vector<float> r(top.size() * V, 0.0f);
    for (size_t i = 0; i < top.size(); ++i) r[i * V + top[i]] = 5.0f;
    return r;
}

Draft propose(LookaheadProposer& p, const std::vector<int32_t>& tokens, int k, int64_t start = 0) {
    Draft d;
    ProposalJob job{1, tokens, start, k, nullptr, &d};
    p.propose({&job, 1});
    return d;
}

void observe(LookaheadProposer& p, const std::vector<int32_t>& fed,
             const std::vector<int32_t>& top) {
    const auto rows = rows_with_argmax(top);
    p.observe(1, fed, rows.data(), V);
}

using S = LookaheadProposer;

}  // namespace

TEST(Lookahead, FirstGuessesComeFromTheLastTokensEarlierOccurrence) {
    LookaheadProposer p(2, 3);
    // No suffix of two tokens recurs, and nothing is pooled: the Jacobi window is seeded with
    // what followed the last token before.
    const Draft d = propose(p, {3, 1, 2, 3}, 3);
    EXPECT_EQ(d.tokens, (std::vector<int32_t>{1, 2, 3}));
    ASSERT_EQ(d.accept.size(), 3u);
    for (double a : d.accept) EXPECT_DOUBLE_EQ(a, S::kPriors[S::kJacobi]);
    // A sequence with nothing to go on drafts nothing.
    LookaheadProposer q(2, 3);
    EXPECT_TRUE(propose(q, {4, 5, 6}, 3).tokens.empty());
}

TEST(Lookahead, JacobiGuessesAreTheTargetsPredictionsPastTheAcceptedPrefix) {
    for (int64_t start : {0, 7}) {  // the same with the tokens a window of a longer sequence
        LookaheadProposer p(2, 3);
        ASSERT_EQ(propose(p, {3, 1, 2, 3}, 3, start).tokens, (std::vector<int32_t>{1, 2, 3}));
        // The target predicts 5 after the last token (rejecting the draft's 1), and 6, 7, 4
        // after each draft token: those are the guesses for the three positions after the 5.
        observe(p, {3, 1, 2, 3}, {5, 6, 7, 4});
        const Draft d = propose(p, {3, 1, 2, 3, 5}, 3, start);
        EXPECT_EQ(d.tokens, (std::vector<int32_t>{6, 7, 4})) << "start " << start;
        // The first draft's token was judged a rejection; the Jacobi rate fell below its prior.
        EXPECT_EQ(p.stats().reached[S::kJacobi], 1);
        EXPECT_EQ(p.stats().accepted[S::kJacobi], 0);
        EXPECT_EQ(p.stats().drafted[S::kJacobi], 3);
        ASSERT_FALSE(d.accept.empty());
        EXPECT_LT(d.accept[0], S::kPriors[S::kJacobi]);
    }
}

TEST(Lookahead, RefinedGuessesBecomePoolNgrams) {
    LookaheadProposer p(2, 3, /*n=*/4);
    propose(p, {3, 1, 2, 3}, 3);
    observe(p, {3, 1, 2, 3}, {5, 6, 7, 4});
    ASSERT_EQ(propose(p, {3, 1, 2, 3, 5}, 3).tokens, (std::vector<int32_t>{6, 7, 4}));
    // 6 and 7 are accepted, 4 is not (the target says 1): the guess 6 that followed 1 last step
    // was refined to 7, so "1 6 7" is an n-gram the target produced, as is "3 4 2".
    observe(p, {5, 6, 7, 4}, {6, 7, 1, 2});
    EXPECT_GT(p.pool_size(1), 0u);
    // The sequence now ends in 1: the pool drafts 6 7 after it, then nothing is pooled after 7
    // and the Jacobi guesses do not reach that far.
    const Draft d = propose(p, {3, 1, 2, 3, 5, 6, 7, 1}, 4);
    EXPECT_EQ(d.tokens, (std::vector<int32_t>{6, 7}));
    for (double a : d.accept) EXPECT_DOUBLE_EQ(a, S::kPriors[S::kPool]);
    // Judged: the Jacobi draft's 6 and 7 accepted, 4 rejected.
    EXPECT_EQ(p.stats().reached[S::kJacobi], 1 + 3);
    EXPECT_EQ(p.stats().accepted[S::kJacobi], 2);
}

TEST(Lookahead, AContextMatchComesFirstAndADeclinedDraftIsStillJudged) {
    LookaheadProposer p(2, 3);
    const std::vector<int32_t> t = {7, 8, 9, 4, 7, 8};
    const Draft d = propose(p, t, 3);
    EXPECT_EQ(d.tokens, (std::vector<int32_t>{9, 4, 7}));
    for (double a : d.accept) EXPECT_DOUBLE_EQ(a, S::kPriors[S::kLookup]);
    // The plan declined it (no observe); plain decoding goes on with 9 and 4, then 1.
    propose(p, {7, 8, 9, 4, 7, 8, 9}, 3);
    EXPECT_EQ(p.stats().reached[S::kLookup], 0) << "not decided yet: no judgement";
    propose(p, {7, 8, 9, 4, 7, 8, 9, 4, 1}, 3);
    EXPECT_EQ(p.stats().reached[S::kLookup], 3);
    EXPECT_EQ(p.stats().accepted[S::kLookup], 2);
    EXPECT_EQ(p.stats().drafted[S::kLookup], 0) << "never verified";
}

TEST(Lookahead, ARolledBackSequenceStartsAfreshAndReleaseForgetsIt) {
    LookaheadProposer p(2, 3);
    propose(p, {3, 1, 2, 3}, 3);
    observe(p, {3, 1, 2, 3}, {5, 6, 7, 4});
    // History replaced by a shorter one: the old guesses are for positions it never reached.
    const Draft d = propose(p, {4, 5}, 3);
    EXPECT_TRUE(d.tokens.empty());
    p.release(1);
    EXPECT_EQ(p.pool_size(1), 0u);
}

TEST(Lookahead, ANeverEndingSequenceHoldsABoundedPool) {
    constexpr int W = 20000;  // a vocabulary wide enough for every n-gram to start afresh
    LookaheadProposer p(2, 3);
    Draft d;
    const std::vector<int32_t> start = {1, 2};
    ProposalJob job{1, start, 0, 4, nullptr, &d};
    p.propose({&job, 1});
    std::vector<float> rows(5 * W, 0.0f);
    for (int32_t t = 0; t + 5 < W; t += 5) {
        const std::vector<int32_t> fed = {t, t + 1, t + 2, t + 3, t + 4};
        p.observe(1, fed, rows.data(), W);
    }
    EXPECT_GT(p.pool_size(1), 1000u);
    EXPECT_LE(p.pool_size(1), LookaheadProposer::kMaxKeys);
}
