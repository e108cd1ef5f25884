// Token masks: which tokens' bytes can continue a grammar state. The vocabulary is walked in
// sorted order so a shared prefix is matched once; the matcher's stacks become nodes of a
// shared tree (a stack is its top node, the rest is its parent chain, equal stacks are the
// same node), so a set of stacks is a small sorted list of ids and one step over a character
// is memoised per (set, character): inside a string, almost every byte of every token is one
// hash lookup.
//
// Most of a mask depends on the top of a stack alone (XGrammar's context-independent tokens):
// inside a JSON string every token without a quote is allowed whatever object the string is
// in. So a mask is kept per stack top too (TopMask: the top kTopDepth entries; the tokens
// they take whole, and the few that pop below them), and a state's mask is the union of its
// tops' masks plus those few tokens checked against the whole stacks. States that differ only
// below the top (the same string rule in another property, another array item, deeper
// recursion) then cost a union and a short check instead of a walk of the vocabulary.
//
// A bounded repetition (maxLength 40: forty links of a chain, each a top of its own) would
// still walk once per count left; a link's top is derived from the longest link's instead
// (derive_top_mask), walking only the tokens long enough to use up what the link has left.
#include <algorithm>
#include <array>
#include <unordered_map>

#include "grammar/matcher.h"
#include "grammar/utf8.h"

namespace ferry::grammar {

class MaskWalker {
    struct VecHash {
        size_t operator()(const std::vector<int32_t>& v) const {
            uint64_t h = 1469598103934665603ull;
            for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
            return h;
        }
    };

  public:
    explicit MaskWalker(const Grammar& g) : g_(g) {
        sets_.emplace_back();  // set 0: no stacks, the dead state
        ascii_.emplace_back();
        ascii_.back().fill(0);
        set_ids_.emplace(std::vector<int32_t>{}, 0);
        // Below a lone top: what is there is unknown, so popping to it gives kContext.
        sentinel_ = node(UINT32_MAX, -1);
    }

    // Heads: kContext (a stack that popped below its top's rule, where the rest of the stack
    // would decide), kEmpty (a complete stack), else a node.
    static constexpr int32_t kContext = -2, kEmpty = -1;

    // A state: a set of stacks and the first bytes of an unfinished character.
    struct State {
        uint32_t set = 0;
        uint32_t acc = 0;  // the unfinished character's bits so far
        uint8_t need = 0;  // continuation bytes still to come
        uint8_t len = 0;   // the character's whole length in bytes
    };

    uint32_t from_stacks(const std::vector<Stack>& stacks) {
        std::vector<int32_t> heads;
        for (const Stack& s : stacks) {
            int32_t n = -1;
            for (uint32_t p : s) n = node(p, n);
            heads.push_back(n);
        }
        return intern_set(std::move(heads));
    }

    // A stack's top entries (bottom first) with nothing known below them.
    uint32_t from_top(const Stack& top) {
        int32_t n = sentinel_;
        for (uint32_t p : top) n = node(p, n);
        return intern_set({n});
    }

    State step_byte(State s, unsigned char b) {
        if (s.need == 0) {
            if (b < 0x80) return {step(s.set, b), 0, 0, 0};
            const int n = utf8_continuations(b);
            if (n < 0) return {};
            State t{s.set, static_cast<uint32_t>(b & (0x3f >> n)), static_cast<uint8_t>(n),
                    static_cast<uint8_t>(n + 1)};
            return range_ok(t) ? t : State{};
        }
        if ((b >> 6) != 2) return {};
        State t{s.set, (s.acc << 6) | (b & 0x3fu), static_cast<uint8_t>(s.need - 1), s.len};
        if (t.need == 0)
            return utf8_scalar_ok(t.acc, t.len) ? State{step(t.set, t.acc), 0, 0, 0} : State{};
        return range_ok(t) ? t : State{};
    }

  private:
    int32_t node(uint32_t pos, int32_t parent) {
        const uint64_t key = (uint64_t{pos} << 32) | static_cast<uint32_t>(parent + 1);
        auto [it, fresh] = intern_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
        if (fresh) nodes_.push_back({pos, parent});
        return it->second;
    }

    uint32_t intern_set(std::vector<int32_t> heads) {
        std::sort(heads.begin(), heads.end());
        heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
        auto [it, fresh] = set_ids_.try_emplace(heads, static_cast<uint32_t>(sets_.size()));
        if (fresh) {
            sets_.push_back(std::move(heads));
            ascii_.emplace_back();
            ascii_.back().fill(kUnknown);
        }
        return it->second;
    }

    // The stacks `pos` (with `parent` below it) expands to, as heads; -1 is the empty stack.
    void expand(uint32_t pos, int32_t parent, std::vector<int32_t>& out) {
        while (true) {
            const Element& e = g_.element(pos);
            if (e.kind == Element::End) {
                if (parent < 0 || parent == sentinel_) {
                    out.push_back(parent < 0 ? kEmpty : kContext);
                    return;
                }
                pos = nodes_[parent].pos;
                parent = nodes_[parent].parent;
                continue;
            }
            if (e.kind == Element::Chars) {
                out.push_back(node(pos, parent));
                return;
            }
            const int32_t ret =
                g_.element(pos + 1).kind == Element::End ? parent : node(pos + 1, parent);
            const auto& alts = g_.alternatives(e.rule);
            for (size_t a = 0; a + 1 < alts.size(); ++a) expand(alts[a], ret, out);
            pos = alts.back();
            parent = ret;
        }
    }

    uint32_t step(uint32_t set, uint32_t cp) {
        if (set == 0) return 0;
        // ASCII steps, nearly all of a vocabulary's bytes, are a table lookup; the rest hash.
        if (cp < 128) {
            if (ascii_[set][cp] != kUnknown) return ascii_[set][cp];
            const uint32_t id = compute_step(set, cp);
            ascii_[set][cp] = id;
            return id;
        }
        const uint64_t key = (uint64_t{set} << 32) | cp;
        if (auto it = memo_.find(key); it != memo_.end()) return it->second;
        const uint32_t id = compute_step(set, cp);
        memo_.emplace(key, id);
        return id;
    }

    uint32_t compute_step(uint32_t set, uint32_t cp) {
        std::vector<int32_t> out;
        for (int32_t h : sets_[set]) {
            if (h < 0) continue;
            const Node n = nodes_[h];
            if (g_.element(n.pos).matches(cp)) expand(n.pos + 1, n.parent, out);
        }
        return intern_set(std::move(out));
    }

    // Some character starting with the bytes so far is accepted by some stack.
    bool range_ok(const State& s) {
        const uint32_t lo = std::max<uint32_t>(s.acc << (6 * s.need), utf8_min_scalar(s.len));
        const uint32_t hi =
            std::min<uint32_t>((s.acc << (6 * s.need)) | ((1u << (6 * s.need)) - 1), 0x10FFFF);
        // The scalars left, less the surrogates: at most two ranges.
        std::pair<uint32_t, uint32_t> parts[2];
        int n = 0;
        if (lo <= std::min(hi, 0xD7FFu)) parts[n++] = {lo, std::min(hi, 0xD7FFu)};
        if (std::max(lo, 0xE000u) <= hi) parts[n++] = {std::max(lo, 0xE000u), hi};
        for (int32_t h : sets_[s.set])
            if (h >= 0)
                for (int k = 0; k < n; ++k)
                    if (overlaps(g_.element(nodes_[h].pos), parts[k].first, parts[k].second))
                        return true;
        return false;
    }

    static bool overlaps(const Element& e, uint32_t lo, uint32_t hi) {
        if (!e.negated) {
            for (const auto& [a, b] : e.ranges)
                if (a <= hi && b >= lo) return true;
            return false;
        }
        // Negated: some code point in [lo, hi] lies outside every range.
        auto r = e.ranges;
        std::sort(r.begin(), r.end());
        uint32_t next = lo;  // the lowest code point not yet known to be covered
        for (const auto& [a, b] : r) {
            if (a > next) break;
            if (b >= next) {
                if (b >= hi) return false;
                next = b + 1;
            }
        }
        return next <= hi;
    }

    struct Node {
        uint32_t pos;
        int32_t parent;
    };
    const Grammar& g_;
    int32_t sentinel_ = -1;
    std::vector<Node> nodes_;
    std::unordered_map<uint64_t, int32_t> intern_;
    std::vector<std::vector<int32_t>> sets_;
    std::unordered_map<std::vector<int32_t>, uint32_t, VecHash> set_ids_;
    std::unordered_map<uint64_t, uint32_t> memo_;
    static constexpr uint32_t kUnknown = 0xffffffffu;
    std::vector<std::array<uint32_t, 128>> ascii_;  // per set: the set after each ASCII char

  public:
    bool has_empty(uint32_t set) const {
        return std::binary_search(sets_[set].begin(), sets_[set].end(), kEmpty);
    }
    bool has_context(uint32_t set) const {
        return !sets_[set].empty() && sets_[set].front() == kContext;
    }
    // About what the memo holds, in bytes (a set is its heads, its 512-byte table of ASCII
    // steps and its index entry): a walker kept across masks is dropped past a bound.
    size_t bytes() const { return nodes_.size() * 40 + sets_.size() * 640 + memo_.size() * 40; }
};

void MaskWalkerDeleter::operator()(MaskWalker* w) const {
    delete w;
}
MaskWalkerPtr make_mask_walker(const Grammar& g) {
    return MaskWalkerPtr(new MaskWalker(g));
}
size_t mask_walker_bytes(const MaskWalker& w) {
    return w.bytes();
}

namespace {

// Walks `pieces` (ascending byte order; lcp[k]: the bytes piece k shares with piece k - 1) from
// `start`, reusing the states of a shared prefix and passing over every piece that extends a
// rejected one (skip(k, d): the first piece after k that shares fewer than d bytes with it,
// or k + 1 where that is not known). verdict(k, v) is called for each piece that is not
// rejected: Accepted when some stack takes it whole; Context when, before it died, a stack
// had popped below its top with bytes of the piece left (the rest of the stack, unknown
// here, would decide them).
enum class Verdict { Accepted, Context };
template <class Piece, class Lcp, class Skip, class OnVerdict>
void walk_sorted(MaskWalker& w, MaskWalker::State start, size_t n, Piece piece, Lcp lcp_of,
                 Skip skip, OnVerdict verdict) {
    std::vector<MaskWalker::State> states(1, start);
    // context[d]: a stack popped below its top within the first d bytes, with bytes left.
    std::vector<char> context(1, 0);
    size_t valid = 0;        // states[0..valid] belong to the current piece's prefix
    size_t dead = SIZE_MAX;  // the previous walk died after this many bytes
    bool died_context = false;
    for (size_t k = 0; k < n;) {
        const std::string_view s = piece(k);
        const size_t lcp = k == 0 ? 0 : lcp_of(k);
        if (dead != SIZE_MAX && lcp >= dead) {  // extends the prefix that died
            if (died_context) verdict(k, Verdict::Context);
            ++k;
            continue;
        }
        size_t d = std::min(lcp, valid);
        if (states.size() < s.size() + 1) {
            states.resize(s.size() + 1);
            context.resize(s.size() + 1);
        }
        dead = SIZE_MAX;
        for (; d < s.size(); ++d) {
            context[d + 1] = context[d] || (states[d].need == 0 && w.has_context(states[d].set));
            states[d + 1] = w.step_byte(states[d], static_cast<unsigned char>(s[d]));
            if (states[d + 1].set == 0) {
                dead = d + 1;
                break;
            }
        }
        if (dead == SIZE_MAX) {
            valid = s.size();
            verdict(k, Verdict::Accepted);
            ++k;
            continue;
        }
        valid = dead - 1;
        died_context = context[dead];
        if (died_context) {
            verdict(k, Verdict::Context);
            ++k;
        } else {
            k = skip(k, dead);  // the pieces before it extend the rejected prefix
        }
    }
}

// walk_sorted over the whole vocabulary.
template <class OnVerdict>
void walk_vocabulary(MaskWalker& w, const Vocabulary& v, MaskWalker::State start,
                     OnVerdict verdict) {
    walk_sorted(
        w, start, v.sorted.size(), [&](size_t k) { return v.sorted_piece(k); },
        [&](size_t k) { return size_t{v.lcp[k]}; },
        [&](size_t k, size_t d) { return v.skip(k, d); }, verdict);
}

// walk_sorted over some of it: `which` (ascending indices into Vocabulary::sorted).
template <class OnVerdict>
void walk_some(MaskWalker& w, const Vocabulary& v, MaskWalker::State start,
               const std::vector<uint32_t>& which, OnVerdict verdict) {
    auto piece = [&](size_t k) { return v.sorted_piece(which[k]); };
    walk_sorted(
        w, start, which.size(), piece,
        [&](size_t k) {
            const std::string_view a = piece(k - 1), b = piece(k);
            size_t n = 0;
            while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
            return n;
        },
        [](size_t k, size_t) { return k + 1; }, verdict);
}

}  // namespace

TokenMask compute_mask(const Grammar& g, const Vocabulary& v, const std::vector<Stack>& stacks,
                       const std::string& pending) {
    MaskWalker w(g);
    return compute_mask(w, v, stacks, pending);
}

TokenMask compute_mask(MaskWalker& w, const Vocabulary& v, const std::vector<Stack>& stacks,
                       const std::string& pending) {
    TokenMask mask(v.n_vocab());
    MaskWalker::State start{w.from_stacks(stacks)};
    for (unsigned char b : pending) start = w.step_byte(start, b);
    if (start.set == 0) return mask;
    if (start.need == 0 && w.has_empty(start.set))
        for (int32_t id : v.end_tokens) mask.set(id);
    walk_vocabulary(w, v, start, [&](size_t k, Verdict r) {
        if (r == Verdict::Accepted) mask.set(v.sorted[k]);
    });
    return mask;
}

TopMask compute_top_mask(const Grammar& g, const Vocabulary& v, const Stack& top) {
    MaskWalker w(g);
    return compute_top_mask(w, v, top);
}

TopMask compute_top_mask(MaskWalker& w, const Vocabulary& v, const Stack& top) {
    TopMask t{TokenMask(v.n_vocab()), {}};
    walk_vocabulary(w, v, MaskWalker::State{w.from_top(top)}, [&](size_t k, Verdict r) {
        if (r == Verdict::Accepted) t.allowed.set(v.sorted[k]);
        if (r == Verdict::Context) t.context.push_back(static_cast<uint32_t>(k));
    });
    return t;
}

TopMask derive_top_mask(MaskWalker& w, const Vocabulary& v, const Stack& top, const TopMask& wide,
                        size_t upto) {
    const std::vector<uint32_t>& longer = v.longer_than(upto);
    TopMask t{wide.allowed, {}};
    for (uint32_t k : longer) t.allowed.clear(v.sorted[k]);
    std::vector<uint32_t> context;
    walk_some(w, v, MaskWalker::State{w.from_top(top)}, longer, [&](size_t i, Verdict r) {
        if (r == Verdict::Accepted) t.allowed.set(v.sorted[longer[i]]);
        if (r == Verdict::Context) context.push_back(longer[i]);
    });
    t.context.reserve(wide.context.size() + context.size());
    for (uint32_t k : wide.context)
        if (v.sorted_at[k + 1] - v.sorted_at[k] <= upto) t.context.push_back(k);
    const auto mid = static_cast<long>(t.context.size());
    t.context.insert(t.context.end(), context.begin(), context.end());
    std::inplace_merge(t.context.begin(), t.context.begin() + mid, t.context.end());
    return t;
}

TokenMask mask_from_tops(const Grammar& g, const Vocabulary& v, const std::vector<Stack>& stacks,
                         const std::vector<const TopMask*>& tops) {
    MaskWalker w(g);
    return mask_from_tops(w, v, stacks, tops);
}

TokenMask mask_from_tops(MaskWalker& w, const Vocabulary& v, const std::vector<Stack>& stacks,
                         const std::vector<const TopMask*>& tops) {
    TokenMask mask(v.n_vocab());
    std::vector<uint32_t> check;  // sorted-vocabulary indices the rest of the stacks decide
    for (const TopMask* t : tops) {
        for (size_t i = 0; i < mask.bits.size(); ++i) mask.bits[i] |= t->allowed.bits[i];
        check.insert(check.end(), t->context.begin(), t->context.end());
    }
    if (tops.size() > 1) {
        std::sort(check.begin(), check.end());
        check.erase(std::unique(check.begin(), check.end()), check.end());
    }
    std::erase_if(check, [&](uint32_t k) { return mask.test(v.sorted[k]); });
    const MaskWalker::State start{w.from_stacks(stacks)};
    if (w.has_empty(start.set))
        for (int32_t id : v.end_tokens) mask.set(id);
    walk_some(w, v, start, check, [&](size_t k, Verdict r) {
        if (r == Verdict::Accepted) mask.set(v.sorted[check[k]]);
    });
    return mask;
}

bool partial_viable(const Grammar& g, const std::vector<Stack>& stacks, std::string_view pending) {
    MaskWalker w(g);
    MaskWalker::State s{w.from_stacks(stacks)};
    for (unsigned char b : pending) s = w.step_byte(s, b);
    return s.set != 0;
}

}  // namespace ferry::grammar
