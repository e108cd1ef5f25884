// Token masks: which tokens' bytes can continue a grammar state. The vocabulary is walked in
// sorted order so a shared prefix is matched once; the matcher's stacks become nodes of a
// shared tree (a stack is its top node, the rest is its parent chain, equal stacks are the
// same node), so a set of stacks is a small sorted list of ids and one step over a character
// is memoised per (set, character): inside a string, almost every byte of every token is one
// hash lookup.
#include <algorithm>
#include <array>
#include <unordered_map>

#include "grammar/matcher.h"
#include "grammar/utf8.h"

namespace ferry::grammar {

namespace {

struct VecHash {
    size_t operator()(const std::vector<int32_t>& v) const {
        uint64_t h = 1469598103934665603ull;
        for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
        return h;
    }
};

class Walker {
  public:
    explicit Walker(const Grammar& g) : g_(g) {
        sets_.emplace_back();  // set 0: no stacks, the dead state
        ascii_.emplace_back();
        ascii_.back().fill(0);
        set_ids_.emplace(std::vector<int32_t>{}, 0);
    }

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
                if (parent < 0) {
                    out.push_back(-1);
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
        const uint32_t lo = std::max(s.acc << (6 * s.need), utf8_min_scalar(s.len));
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
    std::vector<Node> nodes_;
    std::unordered_map<uint64_t, int32_t> intern_;
    std::vector<std::vector<int32_t>> sets_;
    std::unordered_map<std::vector<int32_t>, uint32_t, VecHash> set_ids_;
    std::unordered_map<uint64_t, uint32_t> memo_;
    static constexpr uint32_t kUnknown = 0xffffffffu;
    std::vector<std::array<uint32_t, 128>> ascii_;  // per set: the set after each ASCII char

  public:
    bool has_empty(uint32_t set) const { return !sets_[set].empty() && sets_[set].front() == -1; }
};

}  // namespace

TokenMask compute_mask(const Grammar& g, const Vocabulary& v, const std::vector<Stack>& stacks,
                       const std::string& pending) {
    TokenMask mask(v.n_vocab());
    Walker w(g);
    Walker::State start{w.from_stacks(stacks)};
    for (unsigned char b : pending) start = w.step_byte(start, b);
    if (start.set == 0) return mask;
    if (start.need == 0 && w.has_empty(start.set))
        for (int32_t id : v.end_tokens) mask.set(id);

    // states[d]: the state after the first d bytes of the current token.
    std::vector<Walker::State> states(1, start);
    size_t valid = 0;        // states[0..valid] belong to the current token's prefix
    size_t dead = SIZE_MAX;  // the previous walk died after this many bytes
    for (size_t i = 0; i < v.sorted.size(); ++i) {
        const int32_t id = v.sorted[i];
        const std::string& s = v.pieces[id];
        const size_t lcp = i == 0 ? 0 : v.lcp[i];
        if (dead != SIZE_MAX && lcp >= dead) continue;  // shares the rejected prefix
        size_t d = std::min(lcp, valid);
        if (states.size() < s.size() + 1) states.resize(s.size() + 1);
        dead = SIZE_MAX;
        for (; d < s.size(); ++d) {
            states[d + 1] = w.step_byte(states[d], static_cast<unsigned char>(s[d]));
            if (states[d + 1].set == 0) {
                dead = d + 1;
                break;
            }
        }
        if (dead != SIZE_MAX) {
            valid = dead - 1;
            continue;
        }
        valid = s.size();
        mask.set(id);
    }
    return mask;
}

bool partial_viable(const Grammar& g, const std::vector<Stack>& stacks, std::string_view pending) {
    Walker w(g);
    Walker::State s{w.from_stacks(stacks)};
    for (unsigned char b : pending) s = w.step_byte(s, b);
    return s.set != 0;
}

}  // namespace ferry::grammar
