#include "engine/speculation.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "engine/draft_proposer.h"
#include "engine/loaded_model.h"
#include "engine/lookahead_proposer.h"
#include "engine/medusa_proposer.h"

namespace ferry::engine {

NgramProposer::NgramProposer(int ngram_min, int ngram_max, bool tree)
    : min_(std::max(1, ngram_min)),
      max_(std::max(std::max(1, ngram_min), ngram_max)),
      tree_(tree) {}

std::vector<int32_t> NgramProposer::lookup(std::span<const int32_t> tokens, int k, int ngram_min,
                                           int ngram_max) {
    const int64_t len = static_cast<int64_t>(tokens.size());
    for (int n = ngram_max; n >= ngram_min; --n) {
        if (len <= n) continue;
        const auto suffix = tokens.subspan(len - n);
        // Latest earlier occurrence first: recent context predicts best.
        for (int64_t start = len - n - 1; start >= 0; --start) {
            if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
            const int64_t from = start + n;
            const int64_t take = std::min<int64_t>(k, len - from);
            return {tokens.begin() + from, tokens.begin() + from + take};
        }
    }
    return {};
}

void NgramProposer::lookup_tree(std::span<const int32_t> tokens, int k, int ngram_min,
                                int ngram_max, Draft& out) {
    out.clear();
    k = std::min(k, kMaxTreeDraft);
    if (k <= 0) return;
    struct Node {
        int32_t token, parent;
        int count = 0;  // occurrences through it
        int latest;     // the most recent occurrence through it (0: the latest of all)
        int depth;
    };
    std::vector<Node> nodes;
    const int64_t len = static_cast<int64_t>(tokens.size());
    int occurrences = 0;
    // The longest suffix that occurred earlier, and every occurrence of it, latest first.
    for (int n = ngram_max; n >= ngram_min && occurrences == 0; --n) {
        if (len <= n) continue;
        const auto suffix = tokens.subspan(static_cast<size_t>(len - n));
        for (int64_t start = len - n - 1; start >= 0 && occurrences < kTreeOccurrences; --start) {
            if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
            const int64_t from = start + n, take = std::min<int64_t>(k, len - from);
            int32_t at = -1;
            for (int64_t i = 0; i < take; ++i) {
                const int32_t t = tokens[static_cast<size_t>(from + i)];
                int32_t next = -1;
                for (size_t c = 0; c < nodes.size() && next < 0; ++c)
                    if (nodes[c].parent == at && nodes[c].token == t)
                        next = static_cast<int32_t>(c);
                if (next < 0) {
                    const int depth = at < 0 ? 0 : nodes[static_cast<size_t>(at)].depth + 1;
                    nodes.push_back({t, at, 0, occurrences, depth});
                    next = static_cast<int32_t>(nodes.size()) - 1;
                }
                ++nodes[static_cast<size_t>(next)].count;
                at = next;
            }
            ++occurrences;
        }
    }
    std::vector<int32_t> order(nodes.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    auto score = [&](int32_t i) {
        const Node& n = nodes[static_cast<size_t>(i)];
        return n.count * std::pow(kTreeDepthDecay, n.depth);
    };
    // A child scores below its parent (no more occurrences, one more level), and on a tie in
    // score the shallower comes first: parents precede children.
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        const double sa = score(a), sb = score(b);
        if (sa != sb) return sa > sb;
        const Node &na = nodes[static_cast<size_t>(a)], &nb = nodes[static_cast<size_t>(b)];
        return na.latest != nb.latest ? na.latest < nb.latest : na.depth < nb.depth;
    });
    if (order.size() > static_cast<size_t>(k)) order.resize(static_cast<size_t>(k));
    std::vector<int32_t> index(nodes.size(), -1);
    bool chain = true;
    for (const int32_t i : order) {
        const Node& n = nodes[static_cast<size_t>(i)];
        const int32_t p = n.parent < 0 ? -1 : index[static_cast<size_t>(n.parent)];
        index[static_cast<size_t>(i)] = static_cast<int32_t>(out.tokens.size());
        chain = chain && p == static_cast<int32_t>(out.tokens.size()) - 1;
        out.tokens.push_back(n.token);
        out.parent.push_back(p);
    }
    if (chain) out.parent.clear();
}

void NgramProposer::propose(std::span<ProposalJob> jobs) {
    for (auto& j : jobs) {
        j.out->clear();
        if (j.k <= 0) continue;
        if (tree_)
            lookup_tree(j.tokens, j.k, min_, max_, *j.out);
        else
            j.out->tokens = lookup(j.tokens, j.k, min_, max_);
    }
}

namespace {

float prob_of(const std::vector<Sampler::Candidate>& c, int32_t id) {
    for (const auto& x : c)
        if (x.id == id) return x.p;
    return 0.0f;
}

}  // namespace

std::vector<int32_t> verify_draft(Sampler& sampler, const float* logits, int n_vocab,
                                  const Draft& draft, std::vector<int32_t>& history) {
    std::vector<int32_t> out;
    const size_t k = draft.tokens.size();
    auto row = [&](size_t i) { return std::span<const float>(logits + i * n_vocab, n_vocab); };
    if (draft.q.empty() || sampler.params().greedy()) {
        // Greedy, or a point-mass draft (prompt lookup): the target draws each position exactly
        // as plain decoding would, and the draft only decides how far one pass gets. For q = 1
        // at d, accepting d when the draw is d is the rejection rule (accept with p(d), else a
        // draw from p without d), and it spends the sampler's random stream as plain decoding
        // does, so a seeded request gives the same text with speculation as without, whatever K.
        for (size_t i = 0; i <= k; ++i) {
            const int32_t t = sampler.sample(row(i), history);
            out.push_back(t);
            history.push_back(t);
            if (i == k || t != draft.tokens[i]) break;
        }
        return out;
    }
    for (size_t i = 0; i < k; ++i) {
        const auto p = sampler.candidates(row(i), history);
        const int32_t d = draft.tokens[i];
        const float pd = prob_of(p, d);
        const float qd = prob_of(draft.q[i], d);
        // Accept with probability min(1, p/q).
        if (qd > 0 && sampler.uniform() * qd < pd) {
            out.push_back(d);
            history.push_back(d);
            continue;
        }
        // Rejected: draw from normalize(max(0, p - q)), which together with the accepted
        // mass reproduces p exactly.
        std::vector<Sampler::Candidate> residual;
        double mass = 0;
        for (const auto& c : p) {
            const float q = prob_of(draft.q[i], c.id);
            const float r = c.p - q;
            if (r > 0) {
                residual.push_back({c.id, c.logit, r});
                mass += r;
            }
        }
        int32_t t;
        if (mass > 0) {
            for (auto& c : residual) c.p = static_cast<float>(c.p / mass);
            t = sampler.draw(residual);
        } else {
            t = sampler.draw(p);  // p == q up to rounding: any draw from p is right
        }
        out.push_back(t);
        history.push_back(t);
        return out;
    }
    const int32_t t = sampler.draw(sampler.candidates(row(k), history));
    out.push_back(t);
    history.push_back(t);
    return out;
}

int Draft::depth() const {
    if (parent.empty()) return static_cast<int>(tokens.size());
    std::vector<int> d(tokens.size());
    int deepest = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
        d[i] = parent[i] < 0 ? 1 : d[static_cast<size_t>(parent[i])] + 1;
        deepest = std::max(deepest, d[i]);
    }
    return deepest;
}

size_t Draft::chain_length() const {
    size_t n = 0;
    while (n < tokens.size() && parent_of(n) == static_cast<int32_t>(n) - 1) ++n;
    return n;
}

void Draft::keep_chain() {
    if (parent.empty()) return;
    cut(chain_length());
    parent.clear();
}

std::vector<int32_t> Draft::chain_tokens() const {
    return {tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(chain_length())};
}

void fit_tree_to_window(Draft& d, int window) {
    if (window > 0 && d.is_tree() && d.depth() >= window) d.keep_chain();
}

std::vector<uint64_t> tree_masks(const Draft& d) {
    std::vector<uint64_t> m(d.tokens.size() + 1);
    m[0] = 1;
    for (size_t i = 0; i < d.tokens.size(); ++i) {
        const int32_t p = d.parent_of(i);
        if (p >= static_cast<int32_t>(i) || i + 1 >= 64)
            throw std::logic_error("tree_masks: a parent after its child, or too many tokens");
        m[i + 1] = m[static_cast<size_t>(p + 1)] | (uint64_t{1} << (i + 1));
    }
    return m;
}

TreeVerdict verify_tree(Sampler& sampler, const float* logits, int n_vocab, const Draft& draft,
                        std::vector<int32_t>& history) {
    TreeVerdict v;
    int32_t node = -1;  // the draft token stood on; -1: the sequence's last
    for (;;) {
        const int32_t row = node + 1;
        const int32_t t = sampler.sample(
            std::span<const float>(logits + static_cast<size_t>(row) * n_vocab, n_vocab), history);
        v.tokens.push_back(t);
        v.rows.push_back(row);
        history.push_back(t);
        int32_t next = -1;
        for (size_t c = static_cast<size_t>(node + 1); c < draft.tokens.size(); ++c)
            if (draft.parent_of(c) == node && draft.tokens[c] == t) {
                next = static_cast<int32_t>(c);
                break;
            }
        if (next < 0) return v;
        node = next;
    }
}

TreeVerdict judge_draft(Sampler& sampler, const float* logits, int n_vocab, const Draft& draft,
                        std::vector<int32_t>& history) {
    if (draft.is_tree()) return verify_tree(sampler, logits, n_vocab, draft, history);
    TreeVerdict v;
    v.tokens = verify_draft(sampler, logits, n_vocab, draft, history);
    for (size_t i = 0; i < v.tokens.size(); ++i) v.rows.push_back(static_cast<int32_t>(i));
    return v;
}

std::vector<std::pair<int64_t, int64_t>> tree_slot_moves(const TreeVerdict& v, int64_t start_pos) {
    std::vector<std::pair<int64_t, int64_t>> moves;
    // Depth j's token sits in the chunk at rows[j] >= j; in depth order no move overwrites what
    // a later one reads (move j' > j reads rows[j'] >= j' > j).
    for (size_t j = 1; j < v.rows.size(); ++j)
        if (v.rows[j] != static_cast<int32_t>(j))
            moves.emplace_back(start_pos + v.rows[j], start_pos + static_cast<int64_t>(j));
    return moves;
}

const char* spec_policy_name(SpecPolicy p) {
    return p == SpecPolicy::Fixed ? "fixed" : "cost";
}

Expected<SpecPolicy> parse_spec_policy(const std::string& s) {
    if (s == "cost") return SpecPolicy::Cost;
    if (s == "fixed") return SpecPolicy::Fixed;
    return make_error("unknown speculation policy '{}' (expected cost or fixed)", s);
}

Expected<std::unique_ptr<Proposer>> make_proposer(const SpecConfig& cfg, const LoadedModel& target,
                                                  const LoadedModel* draft, int64_t max_tokens,
                                                  quant::KvDType draft_kv) {
    switch (cfg.method) {
        case SpecMethod::Off:
            return std::unique_ptr<Proposer>();
        case SpecMethod::Ngram:
            return std::unique_ptr<Proposer>(
                std::make_unique<NgramProposer>(cfg.ngram_min, cfg.ngram_max, cfg.ngram_tree));
        case SpecMethod::Lookahead:
            return std::unique_ptr<Proposer>(
                std::make_unique<LookaheadProposer>(cfg.ngram_min, cfg.ngram_max, cfg.lookahead_n));
        case SpecMethod::Medusa: {
            // Unnamed: the file `ferry train-medusa` writes beside the model.
            std::string path = cfg.medusa_heads;
            if (path.empty()) {
                path = model::default_medusa_path(target.path);
                if (!std::filesystem::exists(path))
                    return make_error(
                        "--spec medusa needs Medusa heads: --medusa-heads FILE, or {} (ferry "
                        "train-medusa -m {} writes it)",
                        path, target.path);
            }
            auto heads = model::MedusaHeads::load(path);
            if (!heads) return heads.error();
            auto p = MedusaProposer::create(target, std::move(*heads), cfg.medusa_tree);
            if (!p) return p.error();
            return std::unique_ptr<Proposer>(std::move(*p));
        }
        case SpecMethod::Draft: {
            if (!draft) return make_error("--spec draft needs a draft model (--draft-model)");
            auto p = DraftProposer::create(target, *draft, max_tokens, draft_kv);
            if (!p) return p.error();
            return std::unique_ptr<Proposer>(std::move(*p));
        }
    }
    return std::unique_ptr<Proposer>();
}

}  // namespace ferry::engine
