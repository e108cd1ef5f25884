// Lookahead decoding (Fu et al., "Break the Sequential Dependency of LLM Inference Using
// Lookahead Decoding", 2024) on a chain verifier: no draft model, guesses that the target
// refines itself, and an n-gram pool built from those refinements.
//
// Jacobi iteration: the tokens after the sequence's last one are guessed, the target scores
// the guesses in the verification pass, and wherever a guess is rejected the target's own
// prediction at that position (made with the guesses before it as context) becomes the next
// step's guess there. Repeated, a guess converges to the target's output, and a verified
// prefix of it is kept. Each refinement also says "after token a the target predicts b"; the
// chain of a position's refinements over consecutive steps (a, then b, then c ...) is an n-gram
// the target is likely to produce again, and goes into a pool keyed by its first token.
//
// The paper runs the guesses as a separate 2-D window beside the verification branch, with its
// own attention mask, and verifies several pool n-grams at once. ferry's verifier scores one
// chain of K + 1 positions, so here the window is the chain's own tail: the positions past the
// first rejection are the guesses being refined, for free, since the step computes them
// anyway. Each step drafts, in order of what has proved right most often: a lookup of the
// context's own n-grams (prompt lookup), else the pool's n-gram for the last token, else the
// Jacobi guesses; a short draft is extended from the pool and then by the guesses.
//
// Proposals only choose what gets verified; verify_draft decides what is kept, so the output
// is the target's exactly as with any proposer.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "engine/speculation.h"

namespace ferry::engine {

class LookaheadProposer final : public Proposer {
  public:
    // n: the pool's n-gram length (2..8); pool_per_token: n-grams kept per first token.
    LookaheadProposer(int ngram_min, int ngram_max, int n = 4, int pool_per_token = 8);
    bool cheap() const override { return true; }
    void propose(std::span<ProposalJob> jobs) override;
    void observe(uint64_t seq, std::span<const int32_t> fed, const float* logits,
                 int n_vocab) override;
    void release(uint64_t seq) override { states_.erase(seq); }

    // Where drafted tokens came from, and how each source has done: of the tokens a
    // verification reached (every token before them accepted), how many were accepted. Every
    // proposal is judged, a verified one at the next proposal and one the plan declined against
    // the tokens the sequence goes on to produce (for a point-mass draft, the target's draw
    // equalling the token is what acceptance means), so a source keeps being measured while
    // the plan leaves it out.
    enum Source : uint8_t { kLookup, kPool, kJacobi, kSources };
    // Depth: a token's place in its source's run within a draft. A lookup whose first token was
    // right is usually copying, so its later tokens are likelier: each depth is measured apart.
    static constexpr int kDepths = 8;  // deeper tokens share the last
    struct SourceStats {
        std::array<int64_t, kSources> drafted{};  // verified
        std::array<int64_t, kSources> reached{};
        std::array<int64_t, kSources> accepted{};
        // Per depth, weighted: a sequence's own record fades (each judged proposal scales it by
        // kSeqDecay, so recent proposals weigh most, as AcceptanceStats' do), the pooled one not.
        std::array<std::array<double, kDepths>, kSources> reached_at{}, accepted_at{};
        void record(Source s, int depth, bool ok);
        void fade(double f);
        // The chance at a depth, shrunk while little is known towards the one above it (towards
        // `prior` at the first depth): the same estimate as AcceptanceStats'.
        double rate(Source s, int depth, double prior, double weight) const;
        // One depth's record shrunk towards `prior` alone (rate() chains these down the depths).
        double shrunk(Source s, int depth, double prior, double weight) const {
            return (accepted_at[s][depth] + prior * weight) / (reached_at[s][depth] + weight);
        }
    };
    const SourceStats& stats() const { return stats_; }
    size_t pool_size(uint64_t seq) const;  // n-grams held for a sequence (tests)
    // A source's acceptance before anything is known of it (lookup's is the planner's prior).
    static constexpr std::array<double, kSources> kPriors{0.6, 0.3, 0.2};
    static constexpr double kSeqDecay = 0.9;
    static constexpr size_t kMaxKeys = 4096;  // pool lists per sequence, each map

  private:
    struct PoolEntry {
        std::vector<int32_t> rest;  // the n-gram after its first token
        uint32_t hits = 1;          // times produced
        uint64_t stamp = 0;         // last produced
    };
    struct State {
        // guesses[i] is the guess for the token at index `guess_at + i` of the sequence, and
        // trails[i] the refinements leading to it (ending with it).
        int64_t guess_at = 0;
        std::vector<int32_t> guesses;
        std::vector<std::vector<int32_t>> trails;  // [0]: the token before the trail's first
        // The pool, by an n-gram's first token, and by that and the token before it.
        std::unordered_map<int32_t, std::vector<PoolEntry>> pool;
        std::unordered_map<uint64_t, std::vector<PoolEntry>> pool2;
        // Keys in the order their lists were made: past kMaxKeys the oldest list goes, so a
        // sequence that never ends (a stream under KV eviction) holds a bounded pool.
        std::deque<int32_t> order;
        std::deque<uint64_t> order2;
        int32_t before_last = -1;  // the token before the sequence's last, at the last proposal
        uint64_t clock = 0;
        // The proposal being judged (the last verified one, or a declined one as a shadow),
        // and the latest proposal, which a verification makes the one judged.
        int64_t drafted_at = 0;
        std::vector<int32_t> drafted;
        std::vector<Source> drafted_from;
        int64_t latest_at = 0;
        std::vector<int32_t> latest;
        std::vector<Source> latest_from;
        SourceStats stats;  // this sequence's record
    };
    // Judges the last proposal once the tokens decide it; false while they do not yet.
    bool judge(State& st, std::span<const int32_t> tokens, int64_t start);
    // trail: the token before the n-gram (-1: unknown), then the n-gram.
    void add_to_pool(State& st, const std::vector<int32_t>& trail);
    const PoolEntry* best(const State& st, int32_t before, int32_t first) const;

    int min_, max_, n_, per_token_;
    std::unordered_map<uint64_t, State> states_;
    SourceStats stats_;
};

}  // namespace ferry::engine
