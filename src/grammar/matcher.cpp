#include "grammar/matcher.h"

#include <algorithm>
#include <chrono>

#include "grammar/shared_tops.h"

namespace ferry::grammar {

namespace {

// States beyond this many are dropped wholesale: a recursive grammar can reach unboundedly
// many, and a mask costs n_vocab / 8 bytes.
constexpr size_t kMaxCachedMasks = 4096;
// A walker whose memo has grown past this is dropped rather than kept for the next mask (a
// recursive grammar's sets keep growing); one is kept per thread computing masks at once.
constexpr size_t kMaxWalkerBytes = size_t{16} << 20;
// Top masks kept beside the state masks: states share tops, so fewer are needed.
constexpr size_t kMaxCachedTops = 1024;
// Tops that see more of the grammar than this are not looked up among other grammars' (near
// a large schema's root: costly to compare, and no other schema has them).
constexpr size_t kMaxSignatureElements = 2048;

std::string state_key(const std::vector<Stack>& stacks, const std::string& pending) {
    std::string k;
    for (const Stack& s : stacks) {
        const auto n = static_cast<uint32_t>(s.size());
        k.append(reinterpret_cast<const char*>(&n), 4);
        k.append(reinterpret_cast<const char*>(s.data()), s.size() * 4);
    }
    k += '\xff';
    k += pending;
    return k;
}

}  // namespace

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const Vocabulary> vocab,
                                 std::shared_ptr<SharedTops> shared)
    : grammar_(std::move(g)),
      vocab_(std::move(vocab)),
      shared_(std::move(shared)),
      start_(initial_stacks(grammar_)) {}

std::shared_ptr<const TokenMask> CompiledGrammar::mask(const std::vector<Stack>& stacks,
                                                       const std::string& pending) const {
    std::string key = state_key(stacks, pending);
    {
        std::lock_guard lock(mu_);
        if (auto it = cache_.find(key); it != cache_.end()) {
            ++stats_.hits;
            return it->second;
        }
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<const TokenMask> m;
    MaskWalkerPtr w = take_walker();
    if (pending.empty()) {
        std::vector<std::shared_ptr<const TopMask>> held;
        std::vector<const TopMask*> tops;
        std::vector<Stack> distinct;
        for (const Stack& s : stacks)
            if (!s.empty()) distinct.push_back(stack_top(s));
        std::sort(distinct.begin(), distinct.end());
        distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
        for (const Stack& t : distinct) {
            held.push_back(top_mask(*w, t));
            tops.push_back(held.back().get());
        }
        m = std::make_shared<const TokenMask>(mask_from_tops(*w, *vocab_, stacks, tops));
    } else {  // a token split a character: rare, walked whole
        m = std::make_shared<const TokenMask>(compute_mask(*w, *vocab_, stacks, pending));
    }
    give_back(std::move(w));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard lock(mu_);
    ++stats_.computed;
    stats_.compute_s += s;
    stats_.max_s = std::max(stats_.max_s, s);
    if (cache_.size() >= kMaxCachedMasks) cache_.clear();
    cache_.emplace(std::move(key), m);
    return m;
}

MaskWalkerPtr CompiledGrammar::take_walker() const {
    {
        std::lock_guard lock(mu_);
        if (!walkers_.empty()) {
            MaskWalkerPtr w = std::move(walkers_.back());
            walkers_.pop_back();
            return w;
        }
    }
    return make_mask_walker(grammar_);
}

void CompiledGrammar::give_back(MaskWalkerPtr w) const {
    if (mask_walker_bytes(*w) > kMaxWalkerBytes) return;
    std::lock_guard lock(mu_);
    walkers_.push_back(std::move(w));
}

std::shared_ptr<const TopMask> CompiledGrammar::top_mask(MaskWalker& w, const Stack& top) const {
    std::string key(reinterpret_cast<const char*>(top.data()), top.size() * sizeof(uint32_t));
    {
        std::lock_guard lock(mu_);
        if (auto it = tops_.find(key); it != tops_.end()) return it->second;
    }
    std::string signature;
    if (shared_) {
        signature = top_signature(grammar_, top, kMaxSignatureElements);
        if (auto t = signature.empty() ? nullptr : shared_->find(signature)) {
            std::lock_guard lock(mu_);
            ++stats_.tops_shared;
            if (tops_.size() >= kMaxCachedTops) tops_.clear();
            tops_.emplace(std::move(key), t);
            return t;
        }
    }
    // Inside a bounded repetition (a string's maxLength: one link per length left) the mask is
    // the widest link's but for the tokens long enough to reach the bound. Unless that is most
    // of the vocabulary: walked one token at a time, it costs more than the whole walk, which
    // passes over a rejected prefix's tokens at once.
    Stack wide = top;
    size_t upto = SIZE_MAX;
    for (uint32_t& p : wide)
        if (const auto m = grammar_.widest(p)) {
            p = m->pos;
            upto = std::min<size_t>(upto, m->upto);
        }
    const bool derive =
        upto != SIZE_MAX && vocab_->longer_than(upto).size() * 3 <= vocab_->sorted.size();
    auto t = std::make_shared<const TopMask>(
        derive ? derive_top_mask(w, *vocab_, top, *top_mask(w, wide), upto)
               : compute_top_mask(w, *vocab_, top));
    if (!signature.empty()) shared_->insert(std::move(signature), t);
    std::lock_guard lock(mu_);
    ++stats_.tops_computed;
    stats_.tops_derived += derive;
    if (tops_.size() >= kMaxCachedTops) tops_.clear();
    tops_.emplace(std::move(key), t);
    return t;
}

CompiledGrammar::Stats CompiledGrammar::stats() const {
    std::lock_guard lock(mu_);
    return stats_;
}

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> g)
    : g_(std::move(g)), stacks_(g_->start()) {}

std::shared_ptr<const TokenMask> Matcher::mask() const {
    return g_->mask(stacks_, pending_);
}

bool Matcher::complete() const {
    return pending_.empty() &&
           std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

bool Matcher::can_continue() const {
    return std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return !s.empty(); });
}

bool Matcher::accept(int32_t token) {
    const Vocabulary& v = g_->vocab();
    if (ended_ || token < 0 || token >= v.n_vocab()) return false;
    if (std::find(v.end_tokens.begin(), v.end_tokens.end(), token) != v.end_tokens.end()) {
        if (!complete()) return false;
        ended_ = true;
        return true;
    }
    const std::string& piece = v.pieces[token];
    if (piece.empty()) return false;
    return accept_text(piece);
}

bool Matcher::accept_text(const std::string& bytes) {
    std::string buf = pending_ + bytes;
    std::vector<Stack> stacks = stacks_;
    size_t i = 0;
    while (i < buf.size()) {
        const int n = utf8_continuations(static_cast<unsigned char>(buf[i]));
        if (n < 0) return false;
        if (i + n >= buf.size()) break;  // an unfinished character: kept for the next token
        size_t j = i;
        const uint32_t cp = decode_utf8(buf, j);
        if (j != i + n + 1) return false;  // not valid UTF-8
        if (!utf8_scalar_ok(cp, n + 1)) return false;
        i = j;
        stacks = advance(g_->grammar(), stacks, cp);
        if (stacks.empty()) return false;
    }
    std::string rest = buf.substr(i);
    if (!rest.empty()) {
        // The unfinished character must still be able to become one the grammar allows.
        if (!partial_viable(g_->grammar(), stacks, rest)) return false;
    }
    stacks_ = std::move(stacks);
    pending_ = std::move(rest);
    return true;
}

}  // namespace ferry::grammar
