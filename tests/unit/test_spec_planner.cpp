// The speculation cost policy: its step-cost model, its acceptance estimate, and its plans
// against the closed forms they should reproduce (Leviathan et al.'s expected speed-up, and the
// batch size at which one more draft token stops paying on a compute-bound machine).
#include <gtest/gtest.h>

#include <cmath>

#include "engine/spec_planner.h"

using namespace ferry::engine;

namespace {

StepCostModel linear_cost(double a, double b, int up_to) {
    StepCostModel m(up_to + 1);
    for (int n = 1; n <= up_to; ++n) m.record(n, a + b * n);
    return m;
}

// Leviathan et al. (2023), eq. for the expected walltime improvement: a draft of K tokens each
// accepted with probability a, a target step that costs the same for 1 or K + 1 positions, and
// a draft token costing c target steps.
double leviathan_speedup(double a, int k, double c) {
    return (1 - std::pow(a, k + 1)) / ((1 - a) * (c * k + 1));
}

}  // namespace

TEST(StepCostModel, KnowsNothingBelowItsFirstMeasurement) {
    StepCostModel m(64);
    EXPECT_FALSE(m.estimate(1).has_value());
    m.record(4, 0.010);
    EXPECT_FALSE(m.estimate(3).has_value());
    EXPECT_TRUE(m.measured(4));
    EXPECT_FALSE(m.measured(5));
    EXPECT_DOUBLE_EQ(*m.estimate(4), 0.010);
    EXPECT_DOUBLE_EQ(*m.estimate(9), 0.010) << "one point: flat above it";
}

TEST(StepCostModel, InterpolatesAndExtrapolatesAlongTheMeasuredLine) {
    StepCostModel m(64);
    m.record(1, 0.010);
    m.record(5, 0.030);
    EXPECT_NEAR(*m.estimate(3), 0.020, 1e-12);
    m.record(9, 0.040);
    EXPECT_NEAR(*m.estimate(7), 0.035, 1e-12);
    // Above the largest count: the slope of the two largest (0.01 / 4 per token).
    EXPECT_NEAR(*m.estimate(13), 0.050, 1e-12);
    EXPECT_NEAR(*m.estimate(1000), 0.040 + 0.0025 * 991, 1e-9) << "beyond the table too";
    m.record(0, 1.0);   // ignored: no such step
    m.record(3, -1.0);  // ignored: no such time
    EXPECT_FALSE(m.measured(3));
}

TEST(StepCostModel, FollowsAMachineWhoseSpeedChanges) {
    StepCostModel m(8);
    for (int i = 0; i < 10; ++i) m.record(2, 0.010);
    EXPECT_NEAR(*m.estimate(2), 0.010, 1e-12);
    for (int i = 0; i < 100; ++i) m.record(2, 0.020);  // the machine got busy
    EXPECT_NEAR(*m.estimate(2), 0.020, 1e-12);
    for (int i = 0; i < 10; ++i) m.record(3, 0.015);
    m.record(3, 0.080);  // a step the OS descheduled
    m.record(3, 0.090);
    EXPECT_NEAR(*m.estimate(3), 0.015, 1e-12) << "two outliers in seven steps move nothing";
    for (int i = 0; i < 4; ++i) m.record(3, 0.030);  // a load that lasts
    EXPECT_NEAR(*m.estimate(3), 0.030, 1e-12);
}

TEST(StepCostModel, FindsTheLargestStepWithinATimeBudget) {
    StepCostModel none(64);
    EXPECT_FALSE(none.max_tokens_within(1.0, 64).has_value()) << "nothing measured";

    // 2 ms plus 0.5 ms a token, measured at every count up to 40: the budget's own solution.
    const StepCostModel m = linear_cost(0.002, 0.0005, 40);
    EXPECT_EQ(*m.max_tokens_within(0.01205, 200), 20);  // 2 + 0.5 x 20 = 12 ms
    EXPECT_EQ(*m.max_tokens_within(0.0124, 200), 20);   // 20.8 tokens: whole ones only
    EXPECT_EQ(*m.max_tokens_within(0.01205, 15), 15) << "capped by the limit";
    // Past 40 nothing is measured: no better than in proportion to the 40-token step (22 ms),
    // so 54, where the measured line alone would say 56.
    EXPECT_EQ(*m.max_tokens_within(0.0301, 200), 54);
    EXPECT_EQ(*m.max_tokens_within(0.001, 200), 0) << "even one token takes longer";

    // Sparse measurements: between them, the interpolated line; above them, in proportion.
    StepCostModel s(512);
    s.record(4, 0.010);
    s.record(132, 0.074);  // 0.5 ms a token between
    EXPECT_EQ(*s.max_tokens_within(0.0301, 512), 44);
    EXPECT_EQ(*s.max_tokens_within(0.074, 100), 100);
    StepCostModel one(512);
    one.record(8, 0.010);
    EXPECT_EQ(*one.max_tokens_within(0.020, 300), 16) << "one point: in proportion above it";
    EXPECT_EQ(*one.max_tokens_within(0.012, 300), 9);
    EXPECT_EQ(*one.max_tokens_within(0.020, 5), 5) << "cheaper below a count that fits";
    EXPECT_EQ(*one.max_tokens_within(0.005, 300), 0);

    // An estimate that is not monotone (a noisy width): the largest count that fits wins.
    StepCostModel bumpy(64);
    bumpy.record(10, 0.010);
    bumpy.record(20, 0.030);
    bumpy.record(30, 0.015);
    bumpy.record(40, 0.040);
    EXPECT_EQ(*bumpy.max_tokens_within(0.0201, 64), 32);  // 15 ms at 30, +2.5 ms a token
}

TEST(AcceptanceStats, StartsAtThePriorAndFollowsRecentVerifications) {
    AcceptanceStats a;
    EXPECT_DOUBLE_EQ(a.rates(0.6)[0], 0.6);
    for (int i = 0; i < 30; ++i) a.record(4, 4);  // every draft token accepted
    EXPECT_GT(a.rates(0.6)[0], 0.9);
    EXPECT_GT(a.rates(0.6)[3], 0.9);
    EXPECT_LE(a.rates(0.6)[0], 0.99) << "never certain: a = 1 makes every depth look free";
    EXPECT_DOUBLE_EQ(a.rates(0.6)[4], a.rates(0.6)[3]) << "never proposed: the depth above";
    for (int i = 0; i < 30; ++i) a.record(4, 0);  // the output stopped copying its input
    EXPECT_LT(a.rates(0.6)[0], 0.15);
    AcceptanceStats none;
    none.record(0, 0);  // nothing proposed: nothing learnt
    EXPECT_DOUBLE_EQ(none.rates(0.3)[0], 0.3);
}

TEST(AcceptanceStats, MeasuresEachDepthOnceTheOneBeforeItWasAccepted) {
    // A copying draft: half the time wrong at once, otherwise right all the way (4 tokens).
    AcceptanceStats a;
    for (int i = 0; i < 400; ++i) a.record(4, i % 2 ? 4 : 0, 0.999);
    const DepthRates r = a.rates(0.6);
    EXPECT_NEAR(r[0], 0.5, 0.02);
    for (int j = 1; j < 4; ++j) EXPECT_GT(r[j], 0.98) << "depth " << j + 1;
    // A geometric one: each token right with probability 1/2, judged until the first miss.
    AcceptanceStats g;
    for (int i = 0; i < 800; ++i) g.record(3, std::array{0, 1, 2, 3, 0, 1, 0, 0}[i % 8], 0.999);
    const DepthRates q = g.rates(0.6);
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(q[j], 0.5, 0.05) << "depth " << j + 1;
}

TEST(SpecPlan, ReproducesLeviathansExpectedSpeedup) {
    // A flat step cost (a bandwidth-bound target) and a draft at c target steps per token.
    StepCostModel flat(64);
    for (int n = 1; n <= 40; ++n) flat.record(n, 0.010);
    for (double a : {0.2, 0.5, 0.7, 0.9, 0.97}) {
        for (double c : {0.0, 0.05, 0.2, 0.5, 1.0}) {
            const DraftCandidate cand{constant_rates(a), 16, c * 0.010};
            const DraftPlan p = plan_drafts({&cand, 1}, 1, 1.0, flat, 0.0);
            int best_k = 0;
            double best = 1.0;
            for (int k = 1; k <= 16; ++k)
                if (leviathan_speedup(a, k, c) > best + 1e-12) {
                    best = leviathan_speedup(a, k, c);
                    best_k = k;
                }
            // (With a free draft every token adds a little; the plan stops where a^j < 1e-4.)
            if (c > 0) {
                EXPECT_EQ(p.k[0], best_k) << "a " << a << ", c " << c;
            }
            EXPECT_NEAR(p.tokens_per_s / p.plain_tokens_per_s, best, 1e-3) << "a " << a;
        }
    }
}

TEST(SpecPlan, SwitchesOffAtTheBatchWhereOneMoreTokenStopsPaying) {
    // A compute-bound step: a + b per token. The first draft token of a sequence whose tokens
    // are accepted with probability a pays while B + a over the step with it beats B over the
    // step without: a (a0 + b B) > b B, i.e. B < a a0 / (b (1 - a)).
    const double a0 = 0.004, b = 0.001, alpha = 0.7;
    const StepCostModel cost = linear_cost(a0, b, 200);
    const int threshold = static_cast<int>(std::ceil(alpha * a0 / (b * (1 - alpha)))) - 1;
    ASSERT_EQ(threshold, 9);
    for (int batch = 1; batch <= 16; ++batch) {
        std::vector<DraftCandidate> cands(batch, DraftCandidate{constant_rates(alpha), 4, 0.0});
        const DraftPlan p = plan_drafts(cands, batch, batch, cost, 0.0);
        int total = 0;
        for (int k : p.k) total += k;
        if (batch <= threshold) {
            EXPECT_GT(total, 0) << "batch " << batch;
        } else {
            EXPECT_EQ(total, 0) << "batch " << batch;
        }
    }
    // One sequence alone: the K that maximises (1 + a + .. + a^K) / (a0 + b (1 + K)), which is 3.
    const DraftCandidate one{constant_rates(alpha), 8, 0.0};
    EXPECT_EQ(plan_drafts({&one, 1}, 1, 1.0, cost, 0.0).k[0], 3);
}

TEST(SpecPlan, GivesTheLikelierDraftsTheTokens) {
    const StepCostModel cost = linear_cost(0.004, 0.0005, 64);
    const std::vector<DraftCandidate> cands{{constant_rates(0.9), 6, 0.0},
                                            {constant_rates(0.3), 6, 0.0},
                                            {constant_rates(0.6), 0, 0.0}};
    const DraftPlan p = plan_drafts(cands, 3, 3.0, cost, 0.0);
    EXPECT_GT(p.k[0], p.k[1]);
    EXPECT_EQ(p.k[2], 0) << "nothing proposed, nothing planned";
    EXPECT_GT(p.tokens_per_s, p.plain_tokens_per_s);
}

TEST(SpecPlan, PlansNothingWithoutTheCostOfThePlainStep) {
    StepCostModel cost(64);
    cost.record(8, 0.01);
    const DraftCandidate c{constant_rates(0.9), 4, 0.0};
    EXPECT_EQ(plan_drafts({&c, 1}, 2, 1.0, cost).k[0], 0);
    EXPECT_GT(plan_drafts({&c, 1}, 8, 1.0, cost).k[0], 0) << "flat above: worth a try";
}

TEST(SpecPlan, AMarginKeepsCloseCallsOff) {
    // One draft token at a = 0.5 on a flat cost is worth 1.5x; at a = 0.01, 1.01x: inside the
    // default 2 % margin, so it is not taken.
    StepCostModel flat(8);
    for (int n = 1; n <= 4; ++n) flat.record(n, 0.01);
    const DraftCandidate weak{constant_rates(0.01), 1, 0.0}, strong{constant_rates(0.5), 1, 0.0};
    EXPECT_EQ(plan_drafts({&weak, 1}, 1, 1.0, flat).k[0], 0);
    EXPECT_EQ(plan_drafts({&weak, 1}, 1, 1.0, flat, 0.0).k[0], 1);
    EXPECT_EQ(plan_drafts({&strong, 1}, 1, 1.0, flat).k[0], 1);
}

TEST(SpecPlanner, ProbesOnceInAWhileAfterDeclining) {
    SpecPlanner planner(64);
    for (int n = 1; n <= 8; ++n) planner.record_step(n, 0.004 + 0.004 * n);  // a costly width
    AcceptanceStats seq;
    for (int i = 0; i < 20; ++i) planner.record_verification(seq, 4, 0);
    const DraftCandidate c{planner.acceptance(seq), 4, 0.0};
    EXPECT_LT(c.accept[0], 0.2);
    int probes = 0;
    const int steps = 4 * SpecPlanner::kProbeEvery;
    for (int i = 0; i < steps; ++i) probes += planner.plan({&c, 1}, 1, 1.0).k[0];
    EXPECT_EQ(probes, 4) << "one draft token every " << SpecPlanner::kProbeEvery << " declines";
    EXPECT_EQ(planner.declined_steps(), static_cast<uint64_t>(steps - probes));
    // The pooled record is a new sequence's prior: it starts where the others are.
    EXPECT_LT(planner.acceptance(AcceptanceStats{})[0], 0.3);
}

TEST(SpecPlanner, DraftTimeCountsAgainstTheDraft) {
    StepCostModel flat(16);
    for (int n = 1; n <= 9; ++n) flat.record(n, 0.010);
    // A draft as slow as the target: K draft tokens cost K steps for at most K + 1 tokens.
    const DraftCandidate slow{constant_rates(0.8), 4, 0.010}, cheap{constant_rates(0.8), 4, 0.001};
    EXPECT_EQ(plan_drafts({&slow, 1}, 1, 1.0, flat).k[0], 0);
    EXPECT_GT(plan_drafts({&cheap, 1}, 1, 1.0, flat).k[0], 0);
    SpecPlanner planner;
    planner.record_draft_time(4, 0.008);
    EXPECT_NEAR(planner.draft_seconds_per_token(), 0.002, 1e-12);
    planner.record_draft_time(0, 1.0);  // nothing drafted: nothing learnt
    EXPECT_NEAR(planner.draft_seconds_per_token(), 0.002, 1e-12);
}

TEST(ShadowDraft, JudgesADeclinedDraftByTheTokensThatFollow) {
    ShadowDraft s;
    int proposed = -1, accepted = -1;
    EXPECT_FALSE(s.observe(5, &proposed, &accepted)) << "nothing to judge";
    const std::vector<int32_t> draft{7, 8, 9};
    s.start(draft);
    EXPECT_TRUE(s.active());
    EXPECT_FALSE(s.observe(7, &proposed, &accepted));
    EXPECT_FALSE(s.observe(8, &proposed, &accepted));
    EXPECT_TRUE(s.observe(4, &proposed, &accepted)) << "the third token missed";
    EXPECT_EQ(proposed, 3);
    EXPECT_EQ(accepted, 2);
    EXPECT_FALSE(s.active());
    s.start(draft);
    for (int32_t t : draft) {
        const bool done = s.observe(t, &proposed, &accepted);
        EXPECT_EQ(done, t == 9);
    }
    EXPECT_EQ(accepted, 3) << "all of it";
    s.start(draft);
    EXPECT_TRUE(s.observe(1, &proposed, &accepted));
    EXPECT_EQ(accepted, 0) << "the first missed";
    s.start(draft);
    s.clear();
    EXPECT_FALSE(s.observe(7, &proposed, &accepted)) << "cleared: a real verification judges it";
}

// A TPOT target bounds each request's mean: a request that came in under it lends its slack to
// the step (a longer prefill chunk), the tightest request decides, and one already behind holds
// the step to the target itself.
TEST(StepTimeAllowance, SpendsTheTightestRequestsSlack) {
    EXPECT_DOUBLE_EQ(step_time_allowance(0.05, {}), 0.05) << "nobody decodes";
    // 10 tokens in 0.2 s against 50 ms: the 11th may come 0.3 s later (0.5 s for 10 gaps).
    const TpotProgress fast{10, 0.2};
    EXPECT_DOUBLE_EQ(step_time_allowance(0.05, std::vector{fast}), 0.3);
    const TpotProgress tight{4, 0.16};  // 40 ms a token so far: 40 ms of slack, under the target
    EXPECT_DOUBLE_EQ(step_time_allowance(0.05, std::vector{fast, tight}), 0.05);
    const TpotProgress snug{20, 0.85};  // 150 ms left
    EXPECT_NEAR(step_time_allowance(0.05, std::vector{fast, snug}), 0.15, 1e-12);
    const TpotProgress behind{10, 0.9};
    EXPECT_DOUBLE_EQ(step_time_allowance(0.05, std::vector{fast, behind}), 0.05);
}
