// Speculative decoding must change speed, never output: greedy tokens identical to plain
// decoding (alone and in a batch, both proposers), sampled tokens distributed exactly as the
// target's (a chi-square test that also catches a deliberately broken rule), and every KV
// block back in the pool after many rejections.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <tuple>

#include "engine/draft_proposer.h"
#include "engine/generator.h"
#include "engine/lookahead_proposer.h"
#include "engine/speculation.h"
#include "engine_test_util.h"
#include "gguf/gguf_writer.h"

using namespace ferry::engine;
using namespace ferry::testing;

namespace {

// Pearson's statistic of observed counts against expected probabilities.
double chi_square(const std::vector<int>& counts, const std::vector<double>& p) {
    double n = 0, x2 = 0;
    for (int c : counts) n += c;
    for (size_t i = 0; i < counts.size(); ++i) {
        const double e = n * p[i];
        if (e > 0) x2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    return x2;
}
// 0.1 % critical value of the chi-square distribution with 7 degrees of freedom.
constexpr double kChi2Crit7 = 24.32;

std::vector<double> dense(const std::vector<Sampler::Candidate>& c, int n) {
    std::vector<double> p(n, 0.0);
    for (const auto& x : c) p[x.id] = x.p;
    return p;
}

SamplingParams sampled(float temperature) {
    SamplingParams s;
    s.temperature = temperature;
    s.top_k = 0;
    s.top_p = 1;
    s.min_p = 0;
    s.seed = 7;
    s.has_seed = true;
    return s;
}

// A toy target over 8 tokens: two rows of logits (the first position and, after the draft
// token, the bonus position), and a proposer distribution q that differs from p.
struct Toy {
    static constexpr int V = 8;
    std::vector<float> rows = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f, 2.5f, -0.5f,  // row 0
                               0.0f, -1.f, 3.0f, 1.0f,  0.5f, 2.0f, -2.f, 1.0f};  // row 1
    std::vector<float> q_logits = {2.0f, 0.0f, 1.0f, 1.0f, -1.0f, 2.0f, 0.5f, 1.5f};
};

}  // namespace

TEST(Speculation, NgramLookupFindsTheLatestLongestMatch) {
    //                       0  1  2  3  4  5  6  7  8  9 10 11
    std::vector<int32_t> t = {5, 6, 7, 1, 5, 6, 8, 2, 9, 5, 6, 7};
    // Suffix "5 6 7" occurred at 0: propose what followed it.
    EXPECT_EQ(NgramProposer::lookup(t, 3, 1, 3), (std::vector<int32_t>{1, 5, 6}));
    // Only two tokens of suffix allowed: "6 7" also matches at 1 (same continuation).
    EXPECT_EQ(NgramProposer::lookup(t, 2, 2, 2), (std::vector<int32_t>{1, 5}));
    // Suffix "7" with "5 6 7" excluded by ngram_max 1: latest earlier "7" is at 2.
    EXPECT_EQ(NgramProposer::lookup(t, 10, 1, 1),
              (std::vector<int32_t>{1, 5, 6, 8, 2, 9, 5, 6, 7}));
    // No earlier occurrence of the suffix: nothing proposed.
    std::vector<int32_t> u = {1, 2, 3, 4};
    EXPECT_TRUE(NgramProposer::lookup(u, 4, 1, 3).empty());
    // The latest of two occurrences wins.
    std::vector<int32_t> w = {4, 1, 4, 2, 4};
    EXPECT_EQ(NgramProposer::lookup(w, 1, 1, 1), (std::vector<int32_t>{2}));
}

// The tree of prompt lookup: every occurrence of the longest matching suffix, merged where the
// continuations agree, ranked by the occurrences through a token (decaying with depth), the
// latest first on ties; parents always before children.
TEST(Speculation, NgramTreeMergesTheOccurrencesContinuations) {
    //                        0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15
    std::vector<int32_t> t = {5, 6, 1, 2, 3, 5, 6, 1, 2, 4, 5, 6, 9, 8, 5, 6};
    Draft d;
    // "5 6" occurred at 10 (then 9 8 5 6), 5 (1 2 4 5 6 9) and 0 (1 2 3 5 6 1): 1 (two
    // occurrences) scores 2, the 2 under it 1.4, 9 (one) 1, the 8 under it 0.7, and at depth 2
    // (0.49 each) 9 8's 5 (the latest occurrence) before 1 2's 4 (the next).
    NgramProposer::lookup_tree(t, 6, 1, 2, d);
    EXPECT_EQ(d.tokens, (std::vector<int32_t>{1, 2, 9, 8, 5, 4}));
    EXPECT_EQ(d.parent, (std::vector<int32_t>{-1, 0, -1, 2, 3, 1}));
    // Cut to fewer tokens, it stays a tree (the first n tokens).
    NgramProposer::lookup_tree(t, 3, 1, 2, d);
    EXPECT_EQ(d.tokens, (std::vector<int32_t>{1, 2, 9}));
    EXPECT_EQ(d.parent, (std::vector<int32_t>{-1, 0, -1}));
    // One occurrence: a chain, as plain lookup proposes it.
    std::vector<int32_t> u = {7, 1, 2, 3, 7};
    NgramProposer::lookup_tree(u, 3, 1, 2, d);
    EXPECT_EQ(d.tokens, NgramProposer::lookup(u, 3, 1, 2));
    EXPECT_FALSE(d.is_tree());
    NgramProposer::lookup_tree(std::vector<int32_t>{1, 2, 3}, 3, 1, 2, d);
    EXPECT_TRUE(d.tokens.empty());
}

TEST(Speculation, GreedyVerificationStopsAtTheFirstMismatch) {
    Toy toy;
    Sampler s(sampled(0));
    std::vector<int32_t> history = {3};
    Draft d;
    d.tokens = {6, 4};  // argmax of row 0 is 6 (accepted); row 1's argmax is 2, not 4
    auto out = verify_draft(s, toy.rows.data(), Toy::V, d, history);
    EXPECT_EQ(out, (std::vector<int32_t>{6, 2}));
    EXPECT_EQ(history, (std::vector<int32_t>{3, 6, 2}));
    d.tokens = {0};  // rejected at once: the target's own argmax comes instead
    history = {3};
    EXPECT_EQ(verify_draft(s, toy.rows.data(), Toy::V, d, history), (std::vector<int32_t>{6}));
}

// A tree: the walk follows the branch whose tokens the target draws, whichever it is, and the
// accepted branch's slots move down to its positions.
TEST(Speculation, TreeVerificationWalksTheBranchTheTargetDraws) {
    constexpr int V = 8;
    // Row 0: the last token's; row i + 1: draft token i's. Argmaxes 1, -, -, 5, 7.
    std::vector<float> rows(5 * V, 0.0f);
    rows[0 * V + 1] = rows[3 * V + 5] = rows[4 * V + 7] = 3.0f;
    rows[1 * V + 2] = rows[2 * V + 4] = 3.0f;  // the leading chain's rows, never reached
    Draft d;
    d.tokens = {6, 2, 1, 5};  // the chain 6 -> 2, then the branch 1 -> 5
    d.parent = {-1, 0, -1, 2};
    EXPECT_EQ(d.depth(), 2);
    EXPECT_EQ(tree_masks(d), (std::vector<uint64_t>{0b1, 0b11, 0b111, 0b1001, 0b11001}));
    Sampler s(sampled(0));
    std::vector<int32_t> history = {3};
    const TreeVerdict v = verify_tree(s, rows.data(), V, d, history);
    EXPECT_EQ(v.tokens, (std::vector<int32_t>{1, 5, 7}));
    EXPECT_EQ(v.rows, (std::vector<int32_t>{0, 3, 4}));
    EXPECT_EQ(history, (std::vector<int32_t>{3, 1, 5, 7}));
    using Moves = std::vector<std::pair<int64_t, int64_t>>;
    EXPECT_EQ(tree_slot_moves(v, 10), (Moves{{13, 11}, {14, 12}}));
    // The leading chain accepted moves nothing.
    rows[0 * V + 1] = 0.0f;
    rows[0 * V + 6] = 3.0f;
    history = {3};
    const TreeVerdict c = verify_tree(s, rows.data(), V, d, history);
    EXPECT_EQ(c.tokens, (std::vector<int32_t>{6, 2, 4}));
    EXPECT_TRUE(tree_slot_moves(c, 10).empty());
    // A chain is what is left for a grammar.
    d.keep_chain();
    EXPECT_EQ(d.tokens, (std::vector<int32_t>{6, 2}));
    EXPECT_FALSE(d.is_tree());
}

// Sampled, a tree's walk draws each token from the target's distribution, whatever the tree.
TEST(Speculation, SampledTreeTokensFollowTheTargetDistribution) {
    Toy toy;
    // Rows: the last token's (toy row 0), then each of the root's three children's (toy row 1).
    std::vector<float> rows(toy.rows.begin(), toy.rows.end());
    for (int i = 0; i < 2; ++i) rows.insert(rows.end(), toy.rows.begin() + Toy::V, toy.rows.end());
    for (float temp : {1.0f, 0.7f}) {
        Sampler target(sampled(temp));
        const auto p0 = dense(target.candidates({toy.rows.data(), Toy::V}, {}), Toy::V);
        const auto p1 = dense(target.candidates({toy.rows.data() + Toy::V, Toy::V}, {}), Toy::V);
        std::mt19937_64 rng(5);
        std::vector<int> first(Toy::V, 0), second(Toy::V, 0);
        for (int i = 0; i < 40000; ++i) {
            Draft d;  // three different children of the root
            const int32_t a = static_cast<int32_t>(rng() % Toy::V);
            d.tokens = {a, (a + 1) % Toy::V, (a + 3) % Toy::V};
            d.parent = {-1, -1, -1};
            std::vector<int32_t> h;
            const TreeVerdict v = verify_tree(target, rows.data(), Toy::V, d, h);
            ++first[v.tokens[0]];
            if (v.tokens.size() == 2) ++second[v.tokens[1]];
        }
        EXPECT_LT(chi_square(first, p0), kChi2Crit7) << "temperature " << temp;
        EXPECT_LT(chi_square(second, p1), kChi2Crit7) << "temperature " << temp;
    }
}

TEST(Speculation, SampledTokensFollowTheTargetDistribution) {
    Toy toy;
    for (float temp : {1.0f, 0.7f}) {
        Sampler target(sampled(temp));
        Sampler proposer(sampled(temp));
        const auto p0 = dense(target.candidates({toy.rows.data(), Toy::V}, {}), Toy::V);
        const auto p1 = dense(target.candidates({toy.rows.data() + Toy::V, Toy::V}, {}), Toy::V);
        const auto qc = proposer.candidates({toy.q_logits.data(), Toy::V}, {});
        std::mt19937_64 rng(11);
        std::vector<int> first(Toy::V, 0), bonus(Toy::V, 0), first_point(Toy::V, 0);
        const int trials = 40000;
        for (int i = 0; i < trials; ++i) {
            Draft d;  // a draft model: d ~ q, with q kept for the verifier
            d.tokens = {proposer.draw(qc)};
            d.q = {qc};
            std::vector<int32_t> h;
            auto out = verify_draft(target, toy.rows.data(), Toy::V, d, h);
            ++first[out[0]];
            if (out.size() == 2) ++bonus[out[1]];
            Draft n;  // an n-gram proposal: a fixed token, a point mass
            n.tokens = {static_cast<int32_t>(rng() % 3)};
            h.clear();
            ++first_point[verify_draft(target, toy.rows.data(), Toy::V, n, h)[0]];
        }
        EXPECT_LT(chi_square(first, p0), kChi2Crit7) << "temperature " << temp;
        EXPECT_LT(chi_square(bonus, p1), kChi2Crit7) << "temperature " << temp;
        EXPECT_LT(chi_square(first_point, p0), kChi2Crit7) << "temperature " << temp;
    }
}

TEST(Speculation, TheChiSquareTestCatchesABrokenRule) {
    // The same experiment with two classic mistakes: accepting every draft token, and
    // resampling from p (not the residual) after a rejection. Both must be detected.
    Toy toy;
    Sampler target(sampled(1));
    Sampler proposer(sampled(1));
    const auto pc = target.candidates({toy.rows.data(), Toy::V}, {});
    const auto p0 = dense(pc, Toy::V);
    const auto qc = proposer.candidates({toy.q_logits.data(), Toy::V}, {});
    const auto q0 = dense(qc, Toy::V);
    std::vector<int> accept_all(Toy::V, 0), resample_p(Toy::V, 0);
    for (int i = 0; i < 40000; ++i) {
        const int32_t d = proposer.draw(qc);
        ++accept_all[d];
        const bool accept = target.uniform() * q0[d] < p0[d];
        ++resample_p[accept ? d : target.draw(pc)];
    }
    EXPECT_GT(chi_square(accept_all, p0), 10 * kChi2Crit7);
    EXPECT_GT(chi_square(resample_p, p0), 10 * kChi2Crit7);
}

namespace {

std::vector<std::vector<int32_t>> grounded_prompts() {
    const auto& tok = *model().tokenizer;
    std::vector<std::vector<int32_t>> out;
    for (const char* t : {
             "Repeat after me: the quick brown fox jumps over the lazy dog. The quick brown fox",
             "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
             "def add(a, b):\n    return a + b\n\ndef add(a, b):\n",
             "The capital of France is",
             "Once upon a time, in a land far away, there lived a",
         })
        out.push_back(tok.encode(t, true, false));
    return out;
}

}  // namespace

TEST(Speculation, GeneratorGreedyOutputIsIdenticalForBothProposers) {
    Generator gen(*model().model, ferry::testing::cpu_backend(2), 512);
    NgramProposer ngram(1, 3), tree(1, 3, true);
    auto draft = DraftProposer::create(model(), model(), 512);
    ASSERT_TRUE(draft.ok()) << draft.error().message;
    int accepted = 0, tree_accepted = 0;
    for (const auto& prompt : grounded_prompts()) {
        const auto plain = generate(gen, prompt, 24, {});
        for (int k : {1, 5}) {
            GenerationStats st;
            EXPECT_EQ(generate(gen, prompt, 24, {&ngram, k, SpecPolicy::Fixed}, &st), plain)
                << "ngram k " << k;
            accepted += st.spec_accepted_tokens;
            // Whatever the cost policy plans, the output is the same (at the larger K only:
            // the policy picks its own K up to it).
            if (k > 1) {
                EXPECT_EQ(generate(gen, prompt, 24, {&ngram, k, SpecPolicy::Cost}), plain)
                    << "ngram k " << k << ", cost policy";
                EXPECT_EQ(generate(gen, prompt, 24, {&tree, k, SpecPolicy::Fixed}, &st), plain)
                    << "ngram tree k " << k;
                tree_accepted += st.spec_accepted_tokens;
                EXPECT_EQ(generate(gen, prompt, 24, {&tree, k, SpecPolicy::Cost}), plain)
                    << "ngram tree k " << k << ", cost policy";
                EXPECT_EQ(generate(gen, prompt, 24, {draft->get(), k, SpecPolicy::Cost}), plain)
                    << "draft k " << k << ", cost policy";
            }
            EXPECT_EQ(generate(gen, prompt, 24, {draft->get(), k, SpecPolicy::Fixed}, &st), plain)
                << "draft k " << k;
            // The draft is the target itself: every greedy proposal is right.
            EXPECT_EQ(st.spec_accepted_tokens, st.spec_draft_tokens);
            EXPECT_GT(st.spec_steps, 0);
        }
    }
    EXPECT_GT(accepted, 0);
    EXPECT_GT(tree_accepted, 0);
    EXPECT_EQ((*draft)->blocks_in_use(), 0);
}

// Lookahead drafts from three sources (context lookup, its pool, the Jacobi guesses); with a
// fixed K every source gets verified, and whatever it drafts the output is plain decoding's.
TEST(Speculation, GeneratorGreedyOutputIsIdenticalWithLookahead) {
    Generator gen(*model().model, ferry::testing::cpu_backend(2), 512);
    LookaheadProposer lookahead(2, 3);
    auto prompts = grounded_prompts();
    for (auto& p : mixed_prompts(4, 3)) prompts.push_back(p);
    for (const auto& prompt : prompts) {
        const auto plain = generate(gen, prompt, 24, {});
        for (int k : {1, 5}) {
            EXPECT_EQ(generate(gen, prompt, 24, {&lookahead, k, SpecPolicy::Fixed}), plain)
                << "k " << k;
            if (k > 1) {
                EXPECT_EQ(generate(gen, prompt, 24, {&lookahead, k, SpecPolicy::Cost}), plain)
                    << "k " << k << ", cost policy";
            }
        }
    }
    const auto& st = lookahead.stats();
    for (auto src :
         {LookaheadProposer::kLookup, LookaheadProposer::kPool, LookaheadProposer::kJacobi})
        EXPECT_GT(st.drafted[src], 0) << "source " << int(src) << " never verified";
    EXPECT_GT(st.accepted[LookaheadProposer::kLookup] + st.accepted[LookaheadProposer::kPool] +
                  st.accepted[LookaheadProposer::kJacobi],
              0);
}

// Verifying a prompt-lookup draft draws every position as plain decoding does, so a seeded
// sampled stream is the same text with speculation as without, whatever K the policy picks.
TEST(Speculation, SeededSamplingGivesPlainDecodingsTextWithPromptLookup) {
    Generator gen(*model().model, ferry::testing::cpu_backend(2), 512);
    NgramProposer ngram(1, 3), tree(1, 3, true);
    LookaheadProposer lookahead(1, 3);
    for (float temperature : {0.7f, 1.2f}) {
        const SamplingParams sp = sampled(temperature);
        int drafted = 0;
        for (const auto& prompt : grounded_prompts()) {
            const auto plain = generate(gen, prompt, 32, {}, nullptr, sp);
            // Every K for the fixed policy; one for the cost policy and lookahead, which share
            // its verification (CI's time: this test was 49 s of the unit run with all three).
            for (int k : {1, 3, 6}) {
                GenerationStats st;
                EXPECT_EQ(generate(gen, prompt, 32, {&ngram, k, SpecPolicy::Fixed}, &st, sp), plain)
                    << "k " << k << ", temperature " << temperature;
                drafted += st.spec_draft_tokens;
            }
            EXPECT_EQ(generate(gen, prompt, 32, {&ngram, 6, SpecPolicy::Cost}, nullptr, sp), plain);
            EXPECT_EQ(generate(gen, prompt, 32, {&tree, 6, SpecPolicy::Fixed}, nullptr, sp), plain)
                << "tree, temperature " << temperature;
            // Lookahead's drafts are point masses too.
            EXPECT_EQ(generate(gen, prompt, 32, {&lookahead, 3, SpecPolicy::Fixed}, nullptr, sp),
                      plain)
                << "lookahead, temperature " << temperature;
        }
        EXPECT_GT(drafted, 50) << "too few drafts to show anything";
    }
}

TEST(Speculation, EngineGreedyOutputIsIdenticalInABatch) {
    auto prompts = grounded_prompts();
    for (auto& p : mixed_prompts(11, 5)) prompts.push_back(p);
    std::vector<RequestParams> params;
    for (size_t i = 0; i < prompts.size(); ++i) params.push_back(greedy(8 + int(i % 5) * 6));

    auto plain_engine = make_engine(small_config());
    Engine& plain = *plain_engine;
    const auto expected = run_all(plain, prompts, params);
    for (auto [m, policy, tree] : {std::tuple{SpecMethod::Ngram, SpecPolicy::Fixed, false},
                                   std::tuple{SpecMethod::Draft, SpecPolicy::Fixed, false},
                                   std::tuple{SpecMethod::Lookahead, SpecPolicy::Fixed, false},
                                   std::tuple{SpecMethod::Ngram, SpecPolicy::Fixed, true},
                                   std::tuple{SpecMethod::Ngram, SpecPolicy::Cost, false},
                                   std::tuple{SpecMethod::Draft, SpecPolicy::Cost, false},
                                   std::tuple{SpecMethod::Lookahead, SpecPolicy::Cost, false},
                                   std::tuple{SpecMethod::Ngram, SpecPolicy::Cost, true}}) {
        auto cfg = small_config();
        cfg.spec.method = m;
        cfg.spec.ngram_tree = tree;
        cfg.spec.k = 4;
        cfg.spec.ngram_min = 1;
        cfg.spec.policy = policy;  // fixed: speculate even with 16 sequences decoding
        cfg.draft_model = &model();
        auto spec_engine = make_engine(cfg);
        Engine& spec = *spec_engine;
        const auto got = run_all(spec, prompts, params);
        for (size_t i = 0; i < prompts.size(); ++i) {
            EXPECT_EQ(got[i].tokens.at(0), expected[i].tokens.at(0))
                << spec_method_name(m) << (tree ? " tree" : "") << " (" << spec_policy_name(policy)
                << ") request " << i;
            EXPECT_EQ(got[i].text.at(0), expected[i].text.at(0));
        }
        expect_all_free(spec);
        if (policy == SpecPolicy::Cost) continue;  // what it drafts depends on the timings
        const auto mt = spec.metrics();
        EXPECT_GT(mt.spec_draft_tokens, 0u);
        EXPECT_GT(mt.spec_accepted_tokens, 0u);
        if (m == SpecMethod::Draft) {  // the target as its own draft: every proposal is right
            EXPECT_LT(mt.steps, plain.metrics().steps) << "speculation should need fewer steps";
        }
        expect_all_free(spec);
    }
}

TEST(Speculation, RejectionsAndAbortsGiveBackEveryBlock) {
    // Unigram lookup on varied text proposes often and is often wrong: many rollbacks, some
    // across block boundaries (block size 4), with random aborts on top. Lookahead's guesses
    // are wrong more often still.
    // Unigram lookup as a tree: a token has many earlier occurrences, so many forks, branches
    // moved down, and rejections of every kind.
    for (auto [method, tree] :
         {std::pair{SpecMethod::Ngram, false}, std::pair{SpecMethod::Lookahead, false},
          std::pair{SpecMethod::Ngram, true}}) {
        auto cfg = small_config();
        cfg.block_size = 4;
        cfg.spec.method = method;
        cfg.spec.ngram_tree = tree;
        cfg.spec.ngram_min = 1;
        cfg.spec.ngram_max = 1;
        cfg.spec.k = 7;
        cfg.spec.policy = SpecPolicy::Fixed;
        auto e_engine = make_engine(cfg);
        Engine& e = *e_engine;
        const auto prompts = mixed_prompts(24, 9);
        std::vector<RequestId> ids;
        for (size_t i = 0; i < prompts.size(); ++i) {
            auto id = e.add_request(prompts[i], greedy(20 + int(i % 7) * 5), nullptr);
            ASSERT_TRUE(id.ok());
            ids.push_back(*id);
        }
        std::mt19937 rng(3);
        int steps = 0;
        while (e.has_work()) {
            e.step();
            if (++steps % 5 == 0) e.abort(ids[rng() % ids.size()]);
        }
        const auto m = e.metrics();
        EXPECT_GT(m.spec_draft_tokens - m.spec_accepted_tokens, 100u)
            << "too few rejections, " << spec_method_name(method);
        if (tree) {
            EXPECT_GT(m.spec_tree_moved_steps, 0u) << "no branch off the leading chain won";
        }
        expect_all_free(e);
    }
}

TEST(Speculation, SampledRequestsGiveTheTextOfPlainDecodingWithTheirSeed) {
    for (SpecMethod method : {SpecMethod::Ngram, SpecMethod::Lookahead}) {
        auto cfg = small_config();
        cfg.spec.method = method;
        cfg.spec.ngram_min = 1;
        cfg.spec.policy = SpecPolicy::Fixed;
        auto p = greedy(30);
        p.sampling.temperature = 0.8f;
        p.sampling.seed = 42;
        p.sampling.has_seed = true;
        const auto prompts = grounded_prompts();
        std::vector<RequestParams> params(prompts.size(), p);
        auto cost_cfg = cfg, off_cfg = cfg;
        cost_cfg.spec.policy = SpecPolicy::Cost;
        off_cfg.spec.method = SpecMethod::Off;
        auto a_engine = make_engine(cfg), b_engine = make_engine(cost_cfg),
             c_engine = make_engine(off_cfg);
        Engine &a = *a_engine, &b = *b_engine, &c = *c_engine;
        const auto x = run_all(a, prompts, params);
        const auto y = run_all(b, prompts, params);
        const auto z = run_all(c, prompts, params);
        for (size_t i = 0; i < prompts.size(); ++i) {
            EXPECT_EQ(x[i].tokens.at(0), z[i].tokens.at(0)) << "fixed K, request " << i;
            EXPECT_EQ(y[i].tokens.at(0), z[i].tokens.at(0)) << "cost policy, request " << i;
            EXPECT_EQ(x[i].tokens.at(0).size(), 30u);
        }
        EXPECT_GT(a.metrics().spec_draft_tokens, 0u) << spec_method_name(method);
        expect_all_free(a);
        expect_all_free(b);
    }
}

TEST(Speculation, DraftNeedsAModelAndPerRequestChoiceIsChecked) {
    auto cfg = small_config();
    cfg.spec.method = SpecMethod::Draft;
    EXPECT_FALSE(Engine::create(model(), cfg).ok());
    cfg.spec.method = SpecMethod::Off;
    auto e_engine = make_engine(cfg);
    Engine& e = *e_engine;
    auto p = greedy(4);
    p.spec = SpecMethod::Draft;
    auto r = e.add_request({1, 2, 3}, p, nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("draft"), std::string::npos);
    p.spec = SpecMethod::Ngram;  // per request, with the engine's default off
    EXPECT_TRUE(e.add_request({1, 2, 3}, p, nullptr).ok());
    while (e.has_work()) e.step();
    expect_all_free(e);
}

TEST(Speculation, ADraftWithAnotherVocabularyIsRefused) {
    // The default model with one token's text changed: same sizes, different vocabulary.
    const auto& f = *model().file;
    ferry::gguf::Writer w;
    w.copy_metadata(f);
    ferry::gguf::Value toks = *[&] {
        for (const auto& [k, v] : f.metadata())
            if (k == "tokenizer.ggml.tokens") return &v;
        return static_cast<const ferry::gguf::Value*>(nullptr);
    }();
    auto& items = std::get<ferry::gguf::Array>(toks.v).items;
    const int32_t last = static_cast<int32_t>(items.size()) - 1;
    items.back() = ferry::gguf::make_string("<ferry_not_the_same>");
    w.set("tokenizer.ggml.tokens", toks);
    for (const auto& t : f.tensors())
        ASSERT_TRUE(
            w.add_tensor(t.name, t.shape, t.type, std::vector<uint8_t>(t.data, t.data + t.n_bytes))
                .ok());
    const std::string path = ::testing::TempDir() + "ferry_other_vocab.gguf";
    ASSERT_TRUE(w.write(path).ok());
    auto other = LoadedModel::load(path, false);
    ASSERT_TRUE(other.ok()) << other.error().message;
    auto p = DraftProposer::create(model(), *other, 64);
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.error().message.find("vocabulary"), std::string::npos);
    EXPECT_NE(p.error().message.find(std::to_string(last)), std::string::npos);
    auto cfg = small_config();
    cfg.spec.method = SpecMethod::Draft;
    cfg.draft_model = &*other;
    auto refused = Engine::create(model(), cfg);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find("vocabulary"), std::string::npos);
    std::remove(path.c_str());
}
