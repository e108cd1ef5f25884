// Speculative decoding: a cheap proposer drafts K tokens, the target model scores the K + 1
// positions in one forward pass, and verify_draft keeps the longest prefix the target agrees
// with plus one token of its own. With the rejection rule of Leviathan et al. / Chen et al.
// the tokens kept are distributed exactly as the target alone would have sampled them, so
// speculation changes speed, never output (greedy output is identical token for token).
//
// Proposers only read token histories; they never touch the target's KV cache. The engine
// and the single-stream Generator both schedule the K + 1 positions and roll back what was
// rejected in their own way (truncating a block table or a history).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/sampler.h"
#include "kernels/backend.h"
#include "quant/kv_format.h"

namespace ferry::engine {

struct LoadedModel;

enum class SpecMethod { Off, Ngram, Draft, Lookahead, Medusa };
const char* spec_method_name(SpecMethod m);  // "off", "ngram", "draft", "lookahead", "medusa"
Expected<SpecMethod> parse_spec_method(const std::string& s);

// How many draft tokens a step verifies: Cost chooses 0..K per sequence and step from the
// measured step costs and acceptance (engine/spec_planner.h), Fixed always drafts K.
enum class SpecPolicy { Cost, Fixed };
const char* spec_policy_name(SpecPolicy p);  // "cost", "fixed"
Expected<SpecPolicy> parse_spec_policy(const std::string& s);

struct SpecConfig {
    SpecMethod method = SpecMethod::Off;
    int k = 4;                 // tokens proposed per step (the most, under the cost policy)
    int ngram_min = 2;         // prompt lookup: shortest suffix that may match
    int ngram_max = 4;         // longest suffix tried first
    int lookahead_n = 4;       // lookahead: the length of the n-grams its pool keeps
    bool ngram_tree = false;   // prompt lookup: several occurrences' continuations as a tree
    std::string medusa_heads;  // medusa: the heads file (model/medusa_heads.h)
    int medusa_tree = 0;       // medusa: 0 drafts chains, N > 0 trees of up to N tokens
    SpecPolicy policy = SpecPolicy::Cost;
    // Speculation is switched off for a step when more sequences than this decode together
    // (0: never forced off). The cost policy already declines where a batch keeps the cores
    // busy and K + 1 positions cost nearly K + 1 times as much; this is a hard cap on top.
    int disable_batch = 0;
};

// What a proposer drafts for one sequence: tokens, and per token the distribution it was
// drawn from (empty for a deterministic proposal, which acts as a point mass).
struct Draft {
    std::vector<int32_t> tokens;
    std::vector<std::vector<Sampler::Candidate>> q;
    // Per token, the proposer's estimate of the chance it is accepted once the one before it
    // was, where it knows better than the sequence's record (lookahead mixes sources that are
    // right at very different rates); empty: the planner uses the record.
    std::vector<double> accept;
    // Empty: a chain, token i following token i - 1. Otherwise a tree verified in one pass
    // (tree attention): token i follows token parent[i] (-1: the sequence's last token), every
    // parent before its children, point masses only (q empty), at most kMaxTreeDraft tokens.
    // The first tokens of a tree should be its likeliest chain: an accepted branch that is not
    // its prefix moves its keys and values down to their own positions.
    std::vector<int32_t> parent;
    bool is_tree() const { return !parent.empty(); }
    int32_t parent_of(size_t i) const {
        return parent.empty() ? static_cast<int32_t>(i) - 1 : parent[i];
    }
    int depth() const;  // the longest branch, in tokens
    void clear() {
        tokens.clear();
        q.clear();
        accept.clear();
        parent.clear();
    }
    void cut(size_t n) {  // keeps the first n tokens (a tree's first n stay a tree)
        if (tokens.size() > n) tokens.resize(n);
        if (q.size() > n) q.resize(n);
        if (accept.size() > n) accept.resize(n);
        if (parent.size() > n) parent.resize(n);
    }
    // The tokens of the leading chain: the first ones, each the child of the one before.
    size_t chain_length() const;
    // Keeps only the leading chain of a tree (the part that needs no tree attention).
    void keep_chain();
    // The tokens of that chain (all of them for a chain): what a declined draft is judged by.
    std::vector<int32_t> chain_tokens() const;
};
// A tree token's sliding window counts from its position, while its ancestors sit in slots at
// or above theirs: a tree shallower than the smallest window (`window`, 0: none) keeps every
// ancestor inside it; a deeper one is cut to its leading chain.
void fit_tree_to_window(Draft& d, int window);
// The most draft tokens of a tree: with the sequence's last token, one mask bit each.
inline constexpr int kMaxTreeDraft = kernels::kMaxTreeTokens - 1;

struct ProposalJob {
    uint64_t seq = 0;                 // stable id, so a stateful proposer keeps its cache
    std::span<const int32_t> tokens;  // the whole sequence so far, the last token included
    int64_t start = 0;  // the index of tokens[0] in the sequence (a window of it, under eviction)
    int k = 0;          // propose at most this many
    Sampler* sampler = nullptr;  // the sequence's sampling rules (for q), and its stream
    Draft* out = nullptr;
};

class Proposer {
  public:
    virtual ~Proposer() = default;
    // Proposing costs nothing measurable (a lookup): it drafts the most and the plan trims,
    // instead of being told how many to draft.
    virtual bool cheap() const { return false; }
    virtual void propose(std::span<ProposalJob> jobs) = 0;
    virtual void release(uint64_t /*seq*/) {}  // the sequence ended or was preempted
    // Lets a stateful proposer take in a prompt during prefill (the draft model's own
    // prefill belongs to time-to-first-token, not to decoding). Optional: propose catches up.
    virtual void prefill(uint64_t /*seq*/, std::span<const int32_t> /*tokens*/) {}
    // After a verification: the chain scored (the sequence's last token, then the draft as it
    // was verified, possibly cut by the plan) and the target's logits for each of its positions.
    // Lookahead takes its next guesses from them. Optional.
    virtual void observe(uint64_t /*seq*/, std::span<const int32_t> /*fed*/,
                         const float* /*logits*/, int /*n_vocab*/) {}
    // Whether it drafts from the target's final hidden state (Medusa). Then, after every step
    // that gave a sequence tokens, observe_hidden gets the hidden state (the output head's input)
    // at the position whose logits gave its last token.
    virtual bool wants_hidden() const { return false; }
    // The most tokens it can draft for a sequence in one step (Medusa: one per head, or its
    // tree budget).
    virtual int max_draft() const { return std::numeric_limits<int>::max(); }
    // Whether it drafts trees (Draft::parent).
    virtual bool drafts_trees() const { return false; }
    // Whether max_draft alone bounds a draft, not --spec-k (Medusa's --medusa-tree budget).
    virtual bool own_budget() const { return false; }
    virtual void observe_hidden(uint64_t /*seq*/, std::span<const float> /*h*/) {}
};

// Prompt lookup: the longest suffix of the context (ngram_max down to ngram_min tokens) that
// occurred earlier is looked up, latest occurrence first, and what followed it is proposed.
// Input-grounded work (summaries, edits, code) repeats its input, so this costs nothing
// and is often right.
//
// With `tree`, the continuations of up to kTreeOccurrences earlier occurrences of that suffix
// are merged into a tree (one branch where they agree, a fork where they part), and its K
// likeliest tokens are verified in one pass: where the latest occurrence goes one way and the
// text another that an older occurrence took, the tree still has it.
class NgramProposer final : public Proposer {
  public:
    NgramProposer(int ngram_min, int ngram_max, bool tree = false);
    bool cheap() const override { return true; }
    bool drafts_trees() const override { return tree_; }
    void propose(std::span<ProposalJob> jobs) override;
    static std::vector<int32_t> lookup(std::span<const int32_t> tokens, int k, int ngram_min,
                                       int ngram_max);
    // The tree of up to k tokens (a chain, parent empty, where the occurrences agree). A token
    // ranks by the occurrences that pass through it, times kTreeDepthDecay per level (a deep
    // token is kept only if the ones above it were), the latest occurrence first on ties; in
    // that order a parent always precedes its children, so the first n tokens stay a tree and
    // the cost policy can cut it as it cuts a chain.
    static void lookup_tree(std::span<const int32_t> tokens, int k, int ngram_min, int ngram_max,
                            Draft& out);
    static constexpr int kTreeOccurrences = 8;
    static constexpr double kTreeDepthDecay = 0.7;

  private:
    int min_, max_;
    bool tree_;
};

// Verifies a draft against the target's logits for the K + 1 positions (row i: the next
// token distribution after the i-th draft token's predecessor) and returns the tokens to
// append: the accepted draft tokens, then one token of the target's (1..K+1 tokens).
// history: the sequence so far (for penalties); the accepted tokens are appended to it.
std::vector<int32_t> verify_draft(Sampler& sampler, const float* logits, int n_vocab,
                                  const Draft& draft, std::vector<int32_t>& history);

// A tree's attention masks (kernels::BatchSeq::tree) for the chunk it is verified in: the
// sequence's last token (bit 0), then each draft token (bit i + 1), each seeing its ancestors.
std::vector<uint64_t> tree_masks(const Draft& d);

// verify_draft for point-mass drafts, chains and trees alike: from the sequence's last token,
// the target draws each next token as plain decoding would (so the output, seeded sampling
// included, is plain decoding's), and the walk goes on while the token drawn is a child of
// the node it stands on. rows[i]: the logits row tokens[i] was drawn from (0: the last token's,
// j + 1: draft token j's); the accepted branch is draft tokens rows[1] - 1, rows[2] - 1, ...
struct TreeVerdict {
    std::vector<int32_t> tokens;
    std::vector<int32_t> rows;
    int accepted() const { return static_cast<int>(tokens.size()) - 1; }
};
TreeVerdict verify_tree(Sampler& sampler, const float* logits, int n_vocab, const Draft& draft,
                        std::vector<int32_t>& history);
// verify_draft or verify_tree, as the draft is, with each token's row (a chain's token i came
// from row i).
TreeVerdict judge_draft(Sampler& sampler, const float* logits, int n_vocab, const Draft& draft,
                        std::vector<int32_t>& history);
// The slot moves (from, to) that bring an accepted branch verified from start_pos (the last
// token's slot) to the slots of its positions; none when it was the tree's leading chain.
std::vector<std::pair<int64_t, int64_t>> tree_slot_moves(const TreeVerdict& v, int64_t start_pos);

// Makes the proposer a configuration asks for (nullptr for Off). The draft model must share
// the target's vocabulary; it gets its own paged cache of `max_tokens` token slots, holding
// `draft_kv` elements.
Expected<std::unique_ptr<Proposer>> make_proposer(const SpecConfig& cfg, const LoadedModel& target,
                                                  const LoadedModel* draft, int64_t max_tokens,
                                                  quant::KvDType draft_kv = quant::KvDType::F32);

}  // namespace ferry::engine
