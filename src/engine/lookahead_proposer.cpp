#include "engine/lookahead_proposer.h"

#include <algorithm>

#include "kernels/host_math.h"

namespace ferry::engine {

LookaheadProposer::LookaheadProposer(int ngram_min, int ngram_max, int n, int pool_per_token)
    : min_(std::max(1, ngram_min)),
      max_(std::max(min_, ngram_max)),
      n_(std::clamp(n, 2, 8)),
      per_token_(std::max(1, pool_per_token)) {}

void LookaheadProposer::SourceStats::record(Source s, int depth, bool ok) {
    const int d = std::min(depth, kDepths - 1);
    ++reached[s];
    ++reached_at[s][d];
    if (!ok) return;
    ++accepted[s];
    ++accepted_at[s][d];
}

void LookaheadProposer::SourceStats::fade(double f) {
    for (auto& src : reached_at)
        for (double& x : src) x *= f;
    for (auto& src : accepted_at)
        for (double& x : src) x *= f;
}

double LookaheadProposer::SourceStats::rate(Source s, int depth, double prior,
                                            double weight) const {
    double r = prior;
    for (int d = 0; d <= std::min(depth, kDepths - 1); ++d) r = shrunk(s, d, r, weight);
    return r;
}

namespace {

// Each token's place in its source's run.
std::vector<int> run_depths(const std::vector<LookaheadProposer::Source>& from) {
    std::vector<int> d(from.size(), 0);
    for (size_t i = 1; i < from.size(); ++i) d[i] = from[i] == from[i - 1] ? d[i - 1] + 1 : 0;
    return d;
}

}  // namespace

size_t LookaheadProposer::pool_size(uint64_t seq) const {
    auto it = states_.find(seq);
    if (it == states_.end()) return 0;
    size_t n = 0;
    for (const auto& [first, entries] : it->second.pool) n += entries.size();
    return n;
}

namespace {

uint64_t pair_key(int32_t before, int32_t first) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(before)) << 32) |
           static_cast<uint32_t>(first);
}

bool better(const auto& a, const auto& b) {
    return a.hits != b.hits ? a.hits > b.hits : a.stamp > b.stamp;
}

// One n-gram (first, rest) into a pool list: one the list holds already (or a longer one it
// begins) counts once more; one that extends a held n-gram replaces it; a new one takes the
// place of the least produced, least recent one when the list is full.
template <class Entry>
void add_entry(std::vector<Entry>& entries, std::span<const int32_t> rest, uint64_t clock,
               int cap) {
    for (Entry& e : entries) {
        const size_t common = std::min(e.rest.size(), rest.size());
        if (!std::equal(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(common),
                        e.rest.begin()))
            continue;
        if (rest.size() > e.rest.size()) e.rest.assign(rest.begin(), rest.end());
        ++e.hits;
        e.stamp = clock;
        return;
    }
    if (static_cast<int>(entries.size()) >= cap) {
        auto worst = std::min_element(entries.begin(), entries.end(),
                                      [](const auto& a, const auto& b) { return better(b, a); });
        entries.erase(worst);
    }
    entries.push_back({{rest.begin(), rest.end()}, 1, clock});
}

template <class Entry>
const Entry* best_entry(const std::vector<Entry>* entries) {
    if (!entries || entries->empty()) return nullptr;
    return &*std::min_element(entries->begin(), entries->end(), better<Entry, Entry>);
}

}  // namespace

void LookaheadProposer::add_to_pool(State& st, const std::vector<int32_t>& trail) {
    const int32_t before = trail[0], first = trail[1];
    const std::span<const int32_t> rest(trail.begin() + 2, trail.end());
    ++st.clock;
    auto list = [](auto& map, auto& order, auto key) -> auto& {
        auto [it, made] = map.try_emplace(key);
        if (made) {
            order.push_back(key);
            if (order.size() > kMaxKeys) {
                map.erase(order.front());
                order.pop_front();
            }
        }
        return map[key];
    };
    add_entry(list(st.pool, st.order, first), rest, st.clock, per_token_);
    if (before >= 0)
        add_entry(list(st.pool2, st.order2, pair_key(before, first)), rest, st.clock, per_token_);
}

// The pool's n-gram for a last token, the one that followed the same two tokens first.
const LookaheadProposer::PoolEntry* LookaheadProposer::best(const State& st, int32_t before,
                                                            int32_t first) const {
    if (before >= 0)
        if (auto it = st.pool2.find(pair_key(before, first)); it != st.pool2.end())
            if (const PoolEntry* e = best_entry(&it->second)) return e;
    auto it = st.pool.find(first);
    return best_entry(it == st.pool.end() ? nullptr : &it->second);
}

bool LookaheadProposer::judge(State& st, std::span<const int32_t> tokens, int64_t start) {
    if (st.drafted.empty()) return true;
    size_t decided = 0;
    bool rejected = false;
    for (; decided < st.drafted.size(); ++decided) {
        const int64_t at = st.drafted_at + static_cast<int64_t>(decided) - start;
        if (at >= static_cast<int64_t>(tokens.size())) break;
        if (at < 0 || tokens[at] != st.drafted[decided]) {
            rejected = true;
            break;
        }
    }
    if (!rejected && decided < st.drafted.size()) return false;  // not decided yet
    const std::vector<int> depth = run_depths(st.drafted_from);
    st.stats.fade(kSeqDecay);
    for (size_t i = 0; i <= decided && i < st.drafted.size(); ++i)
        for (SourceStats* s : {&st.stats, &stats_})
            s->record(st.drafted_from[i], depth[i], i < decided);
    st.drafted.clear();
    st.drafted_from.clear();
    return true;
}

void LookaheadProposer::propose(std::span<ProposalJob> jobs) {
    for (ProposalJob& j : jobs) {
        j.out->clear();
        State& st = states_[j.seq];
        const std::span<const int32_t> tokens = j.tokens;
        const int64_t next = j.start + static_cast<int64_t>(tokens.size());  // the index to guess
        if (next < st.drafted_at) {  // rolled back: unjudgeable
            st.drafted.clear();
            st.drafted_from.clear();
        }
        // A declined proposal still being judged is not replaced (a shadow, as ShadowDraft).
        const bool judging = !judge(st, tokens, j.start);
        if (tokens.empty() || j.k <= 0) continue;
        // Guesses for tokens the sequence now holds are spent; what follows them is the guess
        // for the next tokens. A sequence rolled back past them (preempted, or a history that
        // changed) starts guessing afresh.
        if (st.guess_at > next) {
            st.guesses.clear();
            st.trails.clear();
        }
        const int64_t spent =
            std::min<int64_t>(std::max<int64_t>(0, next - st.guess_at), st.guesses.size());
        st.guesses.erase(st.guesses.begin(), st.guesses.begin() + spent);
        st.trails.erase(st.trails.begin(), st.trails.begin() + spent);
        st.guess_at = st.guesses.empty() ? next : st.guess_at + spent;

        std::vector<int32_t>& out = j.out->tokens;
        std::vector<Source> from_src;
        const size_t k = static_cast<size_t>(j.k);
        auto take = [&](std::span<const int32_t> from, Source src) {
            for (int32_t t : from) {
                if (out.size() == k) return;
                out.push_back(t);
                from_src.push_back(src);
            }
        };
        take(NgramProposer::lookup(tokens, j.k, min_, max_), kLookup);
        // The pool's n-grams, chained: each continues from the last token drafted.
        st.before_last = tokens.size() >= 2 ? tokens[tokens.size() - 2] : -1;
        for (size_t guard = 0; out.size() < k && guard < k; ++guard) {
            const int32_t last = out.empty() ? tokens.back() : out.back();
            const int32_t before = out.size() >= 2   ? out[out.size() - 2]
                                   : out.size() == 1 ? tokens.back()
                                                     : st.before_last;
            const PoolEntry* e = best(st, before, last);
            if (!e || e->rest.empty()) break;
            take(e->rest, kPool);
        }
        // Then the Jacobi guesses for the positions still open.
        const size_t from = out.size();
        if (from < st.guesses.size() && st.guess_at == next)
            take(std::span<const int32_t>(st.guesses).subspan(from), kJacobi);
        // Nothing yet to iterate on: start from what followed the last token's latest earlier
        // occurrence (the paper seeds its window from the prompt the same way).
        if (out.empty()) take(NgramProposer::lookup(tokens, j.k, 1, 1), kJacobi);
        // Each token's chance, from its source's record: the sequence's own, leaning on every
        // sequence's while it is short.
        const std::vector<int> depth = run_depths(from_src);
        for (size_t i = 0; i < from_src.size(); ++i) {
            const Source src = from_src[i];
            const int d = std::min(depth[i], kDepths - 1);
            j.out->accept.push_back(
                st.stats.shrunk(src, d, stats_.rate(src, d, kPriors[src], 4.0), 4.0));
        }
        st.latest_at = next;
        st.latest = out;
        st.latest_from = std::move(from_src);
        if (!judging) {
            st.drafted_at = next;
            st.drafted = st.latest;
            st.drafted_from = st.latest_from;
        }
    }
}

void LookaheadProposer::observe(uint64_t seq, std::span<const int32_t> fed, const float* logits,
                                int n_vocab) {
    auto it = states_.find(seq);
    if (it == states_.end() || fed.empty()) return;
    State& st = it->second;
    const size_t m = fed.size() - 1;
    // The chain verified: the sequence's last token, then the draft as planned (possibly cut).
    // What was cut is never judged: the tokens after a verification decide only its prefix.
    if (m <= st.latest.size() && std::equal(fed.begin() + 1, fed.end(), st.latest.begin())) {
        st.drafted_at = st.latest_at;
        st.drafted.assign(st.latest.begin(), st.latest.begin() + static_cast<std::ptrdiff_t>(m));
        st.drafted_from.assign(st.latest_from.begin(),
                               st.latest_from.begin() + static_cast<std::ptrdiff_t>(m));
        for (Source s : st.drafted_from) {
            ++st.stats.drafted[s];
            ++stats_.drafted[s];
        }
    }

    // Row i predicts the token at index first + i. Its input was fed[i]; when that was a guess,
    // the trail that led to it continues with the prediction.
    const int64_t first = st.latest_at;
    std::vector<int32_t> guesses(m + 1);
    std::vector<std::vector<int32_t>> trails(m + 1);
    for (size_t i = 0; i <= m; ++i) {
        const int32_t o = static_cast<int32_t>(
            kernels::argmax(logits + static_cast<size_t>(i) * n_vocab, n_vocab));
        const int64_t at = first - 1 + static_cast<int64_t>(i);  // fed[i]'s index
        const int64_t g = at - st.guess_at;
        std::vector<int32_t> trail;
        if (i > 0 && g >= 0 && g < static_cast<int64_t>(st.guesses.size()) &&
            st.guesses[g] == fed[i])
            trail = st.trails[g];
        else
            trail = {i > 0 ? fed[i - 1] : st.before_last, fed[i]};
        trail.push_back(o);
        // At most n tokens after the one before them.
        if (static_cast<int>(trail.size()) > n_ + 1) trail.erase(trail.begin());
        add_to_pool(st, trail);
        guesses[i] = o;
        trails[i] = std::move(trail);
    }
    st.guess_at = first;
    st.guesses = std::move(guesses);
    st.trails = std::move(trails);
}

}  // namespace ferry::engine
