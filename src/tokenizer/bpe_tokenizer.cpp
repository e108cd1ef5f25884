#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include "tokenizer/merge_loop.h"
#include "tokenizer/special_split.h"
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
    t->strip_ = std::move(v.strip);
    auto in_range = [n](Token id) { return id >= 0 && id < n ? id : Token{-1}; };
    t->bos_ = in_range(v.bos);
    t->eos_ = in_range(v.eos);
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

    // Symbols start as single bytes; a byte missing from the vocabulary stays id -1 and never
    // merges.
    const auto n = static_cast<uint32_t>(raw.size());
    std::vector<MergeSymbol> syms(n);
    for (uint32_t i = 0; i < n; ++i)
        syms[i] = {byte_token_[static_cast<uint8_t>(raw[i])], i, 1, 0, 0};
    link_symbols(syms);
    merge_symbols(syms, [this](const MergeSymbol& l, const MergeSymbol& r) {
        std::optional<MergeCandidate> c;
        if (l.id < 0 || r.id < 0) return c;
        auto it = merges_.find(pair_key(l.id, r.id));
        if (it != merges_.end()) c = MergeCandidate{double(it->second.rank), it->second.result};
        return c;
    });
    // A byte missing from the vocabulary (SmolLM2's has no 0x04) is dropped, as llama.cpp
    // and tokenizers both drop it, not turned into the unknown token.
    for (int i = 0; i >= 0; i = syms[i].next)
        if (syms[i].id >= 0) out.push_back(syms[i].id);
}

std::vector<Token> BpeTokenizer::encode(std::string_view text, bool add_special,
                                        bool parse_special) const {
    // Fragments are either raw text or an already-decided special token.
    auto frags = split_on_specials(
        text, specials_, [this](Token id) -> std::string_view { return tokens_[id]; },
        [&](Token id) { return is_special_attr(attrs_[id], parse_special); }, strip_);

    std::vector<Token> out;
    out.reserve(text.size() / 3 + 2);
    if (add_special && add_bos_) out.push_back(bos_);
    for (const Fragment& f : frags) {
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
