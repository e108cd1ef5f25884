// How many draft tokens each sequence verifies this step, from what speculation costs and
// what it has been earning, so that it runs only where it pays.
//
// Leviathan et al.'s expected-speedup rule, with the costs measured instead of assumed: a
// draft of K tokens whose tokens are each accepted with probability a yields
// 1 + a + a^2 + ... + a^K tokens per verification, and the j-th draft token adds a^j of them.
// Acceptance is not one number, though: a prompt-lookup draft that got its first token right is
// usually copying, so its later tokens are likelier still. The j-th token's chance is therefore
// measured per depth, as the chance it is accepted once the one before it was, and the j-th
// token adds a_1 a_2 ... a_j.
// A step of N0 tokens (B decoding sequences and any prefill chunks) with m draft tokens in all
// costs T(N0 + m), where T is the measured time of a forward pass of that many tokens (on a
// compute-bound CPU T grows with every token; on a bandwidth-bound device it barely moves),
// plus the draft model's time for its tokens. The plan takes draft tokens in order of their
// expected yield and keeps the number m that maximises tokens per second,
//     (N0 + sum of the yields taken) / (T(N0 + m) + draft time),
// which is 0 (no speculation) whenever no m beats plain decoding. The same rule switches
// speculation off in a big batch, where each extra position costs nearly a full token's work.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ferry::engine {

// Seconds a forward pass of n tokens takes, learned from the passes that ran (the median of the
// last few per token count, which follows a drifting machine and shrugs off a descheduled step),
// interpolated between the counts measured.
class StepCostModel {
  public:
    explicit StepCostModel(int max_tokens = 4096);
    void record(int64_t tokens, double seconds);
    // nullopt below the smallest count measured (nothing to go on). Above the largest, the
    // line through the two largest measured counts (flat with one): optimistic, so an unmeasured
    // width gets tried once and then is known.
    std::optional<double> estimate(int64_t tokens) const;
    bool measured(int64_t tokens) const;
    // The largest token count in [1, limit] whose estimated step time is at most `seconds`
    // (0 when even the smallest count measured takes longer); nullopt while nothing is measured.
    // Above the largest count measured a step is assumed to cost at least in proportion to its
    // tokens, so an answer there errs short until a longer step has been measured.
    std::optional<int64_t> max_tokens_within(double seconds, int64_t limit) const;

  private:
    static constexpr size_t kRecent = 7;
    std::vector<double> mean_;  // the estimate per count (the median of its recent steps)
    std::vector<uint32_t> count_;
    std::vector<double> recent_;  // kRecent per count, a ring
};

// A TPOT target (--max-tpot-ms) is a bound on each request's mean time per output token, not
// on every step: a decoding request that has come in under it has slack to spend on the others'
// prefill. One request's progress: tokens out so far and seconds since its first.
struct TpotProgress {
    int tokens = 0;
    double since_first_s = 0;
};
// The time the next step may take so that every request's mean TPOT stays within target_s
// (Sarathi-Serve's budget with each request's slack): the least of target_s x tokens - elapsed
// over the decoding requests, never under target_s itself (a request already behind holds the
// step to the target, which steps without prefill then beat). target_s when none decodes.
double step_time_allowance(double target_s, std::span<const TpotProgress> decoding);

constexpr int kMaxDraftTokens = 32;                      // --spec-k's ceiling
using DepthRates = std::array<double, kMaxDraftTokens>;  // [j]: draft token j + 1

// One sequence's acceptance so far, per draft depth, recent verifications weighing most.
struct AcceptanceStats {
    DepthRates accepted{};  // draft tokens at this depth accepted
    DepthRates trials{};    // ... judged (reached: every token before it was accepted)
    void record(int proposed, int accepted_now, double decay = 0.9);
    // The chance that the token at each depth is accepted once the one before it was, shrunk
    // while little is known towards `prior`: one per depth, or one rate for the first depth
    // and, below it, each depth's own estimate for the next.
    DepthRates rates(const DepthRates& prior, double prior_weight = 2.0) const;
    DepthRates rates(double prior, double prior_weight = 2.0) const;
};

// A prompt-lookup draft the plan declined, judged against the tokens the sequence goes on to
// produce, so that acceptance keeps being learnt while speculation is off (otherwise a sequence
// that stopped copying for a while would never be seen to start again). For a point-mass draft
// the target's draw equalling the draft token is exactly what acceptance means.
class ShadowDraft {
  public:
    bool active() const { return !tokens_.empty(); }
    void start(std::span<const int32_t> draft);
    void clear() { tokens_.clear(); }
    // The sequence produced `token`. True once the draft is judged, with what a verification
    // would have found.
    bool observe(int32_t token, int* proposed, int* accepted);

  private:
    std::vector<int32_t> tokens_;
    size_t matched_ = 0;
};

struct DraftCandidate {
    DepthRates accept{};           // conditional acceptance per depth (AcceptanceStats::rates)
    int max_k = 0;                 // at most this many draft tokens (what was proposed, or room)
    double seconds_per_token = 0;  // the proposer's cost of one draft token (0: prompt lookup)
};
DepthRates constant_rates(double a);

struct DraftPlan {
    std::vector<int> k;             // draft tokens per candidate
    double tokens_per_s = 0;        // expected, with this plan
    double plain_tokens_per_s = 0;  // expected without speculation
};

// base_tokens: the step's tokens without drafts; base_yield: the work they do, in tokens (the
// engine counts a prefill token like an emitted one, so a draft pays only at the rate of the
// step's average token). No plan (all zeros) when the cost of base_tokens is unknown.
// min_gain: the relative gain a plan must promise over plain decoding (a margin for noise).
DraftPlan plan_drafts(std::span<const DraftCandidate> candidates, int64_t base_tokens,
                      double base_yield, const StepCostModel& cost, double min_gain = 0.02);

// What the engine and the single-stream generator keep between steps to plan with: the step
// costs, the draft model's cost per token, every sequence's acceptance pooled (the prior for a
// sequence that has no record yet), and a probe: after a run of declined steps, one draft token
// is tried so that a cost measured under a passing load is measured again.
class SpecPlanner {
  public:
    explicit SpecPlanner(int max_tokens = 4096) : cost_(max_tokens) {}
    void record_step(int64_t tokens, double seconds) { cost_.record(tokens, seconds); }
    void record_draft_time(int64_t tokens, double seconds);
    void record_verification(AcceptanceStats& seq, int proposed, int accepted);
    // A sequence's rates, its own record over the pooled one (which starts at kPrior).
    DepthRates acceptance(const AcceptanceStats& seq) const {
        return seq.rates(pooled_.rates(kPrior));
    }
    // The draft's own per-token estimates (Draft::accept) where its proposer gives them (0 past
    // their end), else the sequence's record.
    DepthRates acceptance(const AcceptanceStats& seq, std::span<const double> per_token) const;
    double draft_seconds_per_token() const { return draft_s_per_token_; }
    // plan_drafts, plus the probe. Counts the steps it declined.
    DraftPlan plan(std::span<const DraftCandidate> candidates, int64_t base_tokens,
                   double base_yield);
    uint64_t declined_steps() const { return declined_total_; }
    const StepCostModel& cost() const { return cost_; }

    static constexpr int kProbeEvery = 32;  // declined steps between probes
    static constexpr double kPrior = 0.6;   // acceptance assumed before any verification

  private:
    StepCostModel cost_;
    AcceptanceStats pooled_;
    double draft_s_per_token_ = 0;
    int declined_run_ = 0;
    uint64_t declined_total_ = 0;
};

}  // namespace ferry::engine
