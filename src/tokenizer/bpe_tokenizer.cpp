#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <queue>

#include "tokenizer/utf8.h"

namespace ferry::tokenizer {

namespace {

uint64_t pair_key(Token a, Token b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Texts llama.cpp treats as end-of-generation whenever the vocabulary has them.
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",   "<|endoftext|>",
    "<|eom_id|>", "<EOT>",      "_<EOT>",  "<|end_of_text|>", "<end_of_utterance>",
};

bool is_special_attr(TokenAttr a, bool parse_special) {
    if (a == TokenAttr::UserDefined) return true;  // matched even without parse_special
    return parse_special && (a == TokenAttr::Control || a == TokenAttr::Unknown);
}

}  // namespace

Expected<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(BpeVocab v) {
    if (v.tokens.empty()) return make_error("tokenizer: the vocabulary is empty");
    if (!v.attrs.empty() && v.attrs.size() != v.tokens.size())
        return make_error("tokenizer: {} token types for {} tokens", v.attrs.size(),
                          v.tokens.size());
    auto pre = PreTokenizer::create(v.pre);
    if (!pre) return pre.error();

    std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
    t->pre_ = std::move(pre.value());
    t->tokens_ = std::move(v.tokens);
    const auto n = static_cast<Token>(t->tokens_.size());
    t->attrs_ = v.attrs.empty() ? std::vector<TokenAttr>(n, TokenAttr::Normal) : std::move(v.attrs);
    auto in_range = [n](Token id) { return id >= 0 && id < n ? id : Token{-1}; };
    t->bos_ = in_range(v.bos);
    t->eos_ = in_range(v.eos);
    t->unk_ = in_range(v.unk);
    t->add_bos_ = v.add_bos.value_or(t->pre_->default_add_bos()) && t->bos_ >= 0;
    t->add_eos_ = v.add_eos.value_or(false) && t->eos_ >= 0;

    t->text_to_id_.reserve(n);
    t->pieces_.resize(n);
    for (Token id = 0; id < n; ++id) {
        // First occurrence wins, like llama.cpp's token_to_id built in id order.
        t->text_to_id_.emplace(t->tokens_[id], id);
        if (t->attrs_[id] == TokenAttr::Normal || t->attrs_[id] == TokenAttr::Byte ||
            t->attrs_[id] == TokenAttr::Undefined || t->attrs_[id] == TokenAttr::Unused)
            t->pieces_[id] = unicode_to_bytes(t->tokens_[id]);
        else
            t->pieces_[id] = t->tokens_[id];
        if (t->attrs_[id] != TokenAttr::Normal && !t->tokens_[id].empty() &&
            is_special_attr(t->attrs_[id], true))
            t->specials_.push_back(id);
    }
    std::stable_sort(t->specials_.begin(), t->specials_.end(),
                     [&](Token a, Token b) { return t->tokens_[a].size() > t->tokens_[b].size(); });
    for (int b = 0; b < 256; ++b)
        t->byte_token_[b] = t->find_token(bytes_to_unicode(std::string(1, static_cast<char>(b))));

    t->merges_.reserve(v.merges.size());
    for (size_t rank = 0; rank < v.merges.size(); ++rank) {
        const std::string& m = v.merges[rank];
        // Search from 1: a left part may itself be a space in a non-byte-level vocab.
        size_t sp = m.find(' ', 1);
        if (sp == std::string::npos)
            return make_error("tokenizer: merge {} ('{}') has no space", rank, m);
        std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
        Token l = t->find_token(left), r = t->find_token(right);
        Token res = t->find_token(std::string(left) + std::string(right));
        // A merge whose parts or result are missing could never produce a token.
        if (l < 0 || r < 0 || res < 0) continue;
        t->merges_.try_emplace(pair_key(l, r), Merge{static_cast<int32_t>(rank), res});
    }

    t->eog_.assign(n, false);
    for (Token id : {t->eos_, in_range(v.eot), in_range(v.eom)})
        if (id >= 0) t->eog_[id] = true;
    for (auto text : kEogTexts)
        if (Token id = t->find_token(text); id >= 0) t->eog_[id] = true;
    return t;
}

void BpeTokenizer::encode_piece(std::string_view raw, std::vector<Token>& out) const {
    if (raw.size() == 1) {
        Token id = byte_token_[static_cast<uint8_t>(raw[0])];
        if (id >= 0) out.push_back(id);
        return;
    }
    if (pre_->ignore_merges()) {
        if (Token id = find_token(bytes_to_unicode(raw)); id >= 0) {
            out.push_back(id);
            return;
        }
    }

    // Symbols start as single bytes in a doubly linked list; a merged pair keeps the left
    // slot. Stale queue entries are recognised by their ids no longer matching.
    struct Sym {
        Token id;
        int prev, next;
    };
    struct Bigram {
        int32_t rank;
        int left;
        Token lid, rid;
        bool operator<(const Bigram& o) const {  // priority_queue pops the "largest"
            return rank != o.rank ? rank > o.rank : left > o.left;
        }
    };
    const int n = static_cast<int>(raw.size());
    std::vector<Sym> syms(n);
    for (int i = 0; i < n; ++i)
        syms[i] = {byte_token_[static_cast<uint8_t>(raw[i])], i - 1, i + 1 < n ? i + 1 : -1};

    std::vector<Bigram> storage;
    storage.reserve(n);
    std::priority_queue<Bigram> queue(std::less<Bigram>(), std::move(storage));
    auto try_add = [&](int left) {
        if (left < 0) return;
        int right = syms[left].next;
        if (right < 0 || syms[left].id < 0 || syms[right].id < 0) return;
        auto it = merges_.find(pair_key(syms[left].id, syms[right].id));
        if (it != merges_.end()) queue.push({it->second.rank, left, syms[left].id, syms[right].id});
    };
    for (int i = 0; i + 1 < n; ++i) try_add(i);

    while (!queue.empty()) {
        Bigram b = queue.top();
        queue.pop();
        Sym& l = syms[b.left];
        if (l.id != b.lid || l.next < 0 || syms[l.next].id != b.rid) continue;
        Sym& r = syms[l.next];
        l.id = merges_.at(pair_key(b.lid, b.rid)).result;
        r.id = -2;  // absorbed
        l.next = r.next;
        if (l.next >= 0) syms[l.next].prev = b.left;
        try_add(l.prev);
        try_add(b.left);
    }
    for (int i = 0; i >= 0; i = syms[i].next) {
        if (syms[i].id >= 0)
            out.push_back(syms[i].id);
        else if (unk_ >= 0)
            out.push_back(unk_);  // a byte missing from the vocabulary
    }
}

std::vector<Token> BpeTokenizer::encode(std::string_view text, bool add_special,
                                        bool parse_special) const {
    // Fragments are either raw text or an already-decided special token (llama.cpp's
    // tokenizer_st_partition): each special, longest first, is cut out of the remaining text.
    struct Frag {
        Token id;  // -1: text
        std::string_view text;
    };
    std::vector<Frag> frags{{-1, text}};
    for (Token sid : specials_) {
        if (!is_special_attr(attrs_[sid], parse_special)) continue;
        const std::string& st = tokens_[sid];
        if (text.find(st) == std::string_view::npos) continue;
        std::vector<Frag> next;
        for (const Frag& f : frags) {
            if (f.id >= 0) {
                next.push_back(f);
                continue;
            }
            size_t from = 0;
            for (size_t at; (at = f.text.find(st, from)) != std::string_view::npos;
                 from = at + st.size()) {
                if (at > from) next.push_back({-1, f.text.substr(from, at - from)});
                next.push_back({sid, {}});
            }
            if (from < f.text.size()) next.push_back({-1, f.text.substr(from)});
        }
        frags.swap(next);
    }

    std::vector<Token> out;
    out.reserve(text.size() / 3 + 2);
    if (add_special && add_bos_) out.push_back(bos_);
    for (const Frag& f : frags) {
        if (f.id >= 0) {
            out.push_back(f.id);
            continue;
        }
        for (auto piece : pre_->split(f.text)) encode_piece(piece, out);
    }
    if (add_special && add_eos_) out.push_back(eos_);
    return out;
}

std::string BpeTokenizer::token_to_piece(Token id, bool render_special) const {
    if (id < 0 || id >= n_vocab()) return {};
    TokenAttr a = attrs_[id];
    if (!render_special && (a == TokenAttr::Control || a == TokenAttr::Unknown)) return {};
    return pieces_[id];
}

bool BpeTokenizer::is_eog(Token id) const {
    return id >= 0 && id < n_vocab() && eog_[id];
}

const std::string& BpeTokenizer::token_text(Token id) const {
    static const std::string empty;
    return id >= 0 && id < n_vocab() ? tokens_[id] : empty;
}

TokenAttr BpeTokenizer::token_attr(Token id) const {
    return id >= 0 && id < n_vocab() ? attrs_[id] : TokenAttr::Undefined;
}

Token BpeTokenizer::find_token(std::string_view text) const {
    auto it = text_to_id_.find(text);
    return it == text_to_id_.end() ? -1 : it->second;
}

}  // namespace ferry::tokenizer
