#include "tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <charconv>

#include "tokenizer/merge_loop.h"
#include "tokenizer/special_split.h"

namespace ferry::tokenizer {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Texts llama.cpp treats as end-of-generation (and so as control tokens) whenever the
// vocabulary has them, whatever their token type says.
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "[e~[",
};

// llama.cpp's character length, read from the lead byte's high bits alone: a stray
// continuation byte is one character, a 0xF8..0xFF byte claims four.
int spm_char_len(uint8_t lead) {
    static constexpr int kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return kLen[lead >> 4];
}

std::string escape_spaces(std::string_view text) {
    std::string out;
    out.reserve(text.size() + text.size() / 4);
    for (char c : text) {
        if (c == ' ')
            out += kSpace;
        else
            out += c;
    }
    return out;
}

std::string unescape_spaces(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        if (text.substr(i, kSpace.size()) == kSpace) {
            out += ' ';
            i += kSpace.size();
        } else {
            out += text[i++];
        }
    }
    return out;
}

// "<0x0A>" -> 10; -1 for anything else.
int byte_token_value(std::string_view text) {
    if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
    int v = 0;
    auto [p, ec] = std::from_chars(text.data() + 3, text.data() + 5, v, 16);
    return ec == std::errc() && p == text.data() + 5 ? v : -1;
}

}  // namespace

Expected<SpmVocab> read_spm_vocab(const gguf::File& f) {
    SpmVocab v;
    const gguf::Array* tokens = f.get_array("tokenizer.ggml.tokens");
    if (!tokens) return make_error("{}: missing metadata key tokenizer.ggml.tokens", f.path());
    for (size_t i = 0; i < tokens->items.size(); ++i) {
        const std::string* t = tokens->items[i].as_string();
        if (!t) return make_error("{}: tokenizer.ggml.tokens[{}] is not a string", f.path(), i);
        v.tokens.push_back(*t);
    }
    if (const gguf::Array* scores = f.get_array("tokenizer.ggml.scores")) {
        if (scores->items.size() < v.tokens.size())
            return make_error("{}: {} scores for {} tokens", f.path(), scores->items.size(),
                              v.tokens.size());
        v.scores.reserve(v.tokens.size());
        for (size_t i = 0; i < v.tokens.size(); ++i) {
            auto s = scores->items[i].as_float();
            if (!s) return make_error("{}: tokenizer.ggml.scores[{}] is not a number", f.path(), i);
            v.scores.push_back(static_cast<float>(*s));
        }
    }
    if (const gguf::Array* types = f.get_array("tokenizer.ggml.token_type")) {
        for (const auto& item : types->items)
            v.attrs.push_back(static_cast<TokenAttr>(item.as_int().value_or(1)));
    }
    if (!v.attrs.empty() && v.attrs.size() < v.tokens.size())
        return make_error("{}: {} token types for {} tokens", f.path(), v.attrs.size(),
                          v.tokens.size());
    v.attrs.resize(v.attrs.empty() ? 0 : v.tokens.size());
    // llama.cpp's SPM defaults, each replaced by the file's key when that is in range.
    const auto n = static_cast<Token>(v.tokens.size());
    auto pick = [&](std::string_view key, Token fallback) {
        auto id = static_cast<Token>(f.get_int(key).value_or(-1));
        if (id >= 0 && id < n) return id;
        return fallback < n ? fallback : Token{-1};
    };
    v.bos = pick("tokenizer.ggml.bos_token_id", 1);
    v.eos = pick("tokenizer.ggml.eos_token_id", 2);
    v.unk = pick("tokenizer.ggml.unknown_token_id", 0);
    v.eot = pick("tokenizer.ggml.eot_token_id", -1);
    v.eom = pick("tokenizer.ggml.eom_token_id", -1);
    v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
    v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
    v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    return v;
}

Expected<std::unique_ptr<SpmTokenizer>> SpmTokenizer::create(SpmVocab v) {
    if (v.tokens.empty()) return make_error("tokenizer: the vocabulary is empty");
    const auto n = static_cast<Token>(v.tokens.size());
    if (!v.scores.empty() && v.scores.size() != v.tokens.size())
        return make_error("tokenizer: {} scores for {} tokens", v.scores.size(), v.tokens.size());
    if (!v.attrs.empty() && v.attrs.size() != v.tokens.size())
        return make_error("tokenizer: {} token types for {} tokens", v.attrs.size(),
                          v.tokens.size());

    std::unique_ptr<SpmTokenizer> t(new SpmTokenizer());
    t->tokens_ = std::move(v.tokens);
    t->scores_ = v.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(v.scores);
    t->attrs_ = v.attrs.empty() ? std::vector<TokenAttr>(n, TokenAttr::Normal) : std::move(v.attrs);
    t->strip_ = std::move(v.strip);
    auto in_range = [n](Token id) { return id >= 0 && id < n ? id : Token{-1}; };
    t->bos_ = in_range(v.bos);
    t->eos_ = in_range(v.eos);
    t->unk_ = in_range(v.unk);
    t->add_bos_ = v.add_bos && t->bos_ >= 0;
    t->add_eos_ = v.add_eos && t->eos_ >= 0;
    t->add_space_prefix_ = v.add_space_prefix;

    t->text_to_id_.reserve(n);
    for (Token id = 0; id < n; ++id) {
        std::string& text = t->tokens_[id];
        if (text.empty()) text = "[EMPTY_" + std::to_string(id) + "]";  // as llama.cpp names it
    }
    // Later duplicates win, as in llama.cpp's token_to_id map filled in id order.
    for (Token id = 0; id < n; ++id) t->text_to_id_.insert_or_assign(t->tokens_[id], id);

    t->eog_.assign(n, false);
    for (auto text : kEogTexts) {
        Token id = t->find_token(text);
        if (id < 0) continue;
        t->eog_[id] = true;
        if (t->attrs_[id] != TokenAttr::Control && t->attrs_[id] != TokenAttr::Unknown)
            t->attrs_[id] = TokenAttr::Control;
    }
    for (Token id : {t->eos_, in_range(v.eot), in_range(v.eom)})
        if (id >= 0) t->eog_[id] = true;

    t->pieces_.resize(n);
    for (Token id = 0; id < n; ++id) {
        const std::string& text = t->tokens_[id];
        switch (t->attrs_[id]) {
            case TokenAttr::Normal:
                t->pieces_[id] = unescape_spaces(text);
                break;
            case TokenAttr::Byte:
                if (int b = byte_token_value(text); b >= 0)
                    t->pieces_[id] = std::string(1, static_cast<char>(b));
                break;
            case TokenAttr::Control:
            case TokenAttr::Unknown:
            case TokenAttr::UserDefined:
                t->pieces_[id] = text;
                t->specials_.push_back(id);
                break;
            default:  // unused and undefined tokens decode to nothing, as in llama.cpp
                break;
        }
    }
    std::stable_sort(t->specials_.begin(), t->specials_.end(),
                     [&](Token a, Token b) { return t->tokens_[a].size() > t->tokens_[b].size(); });

    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
        Token id = t->find_token(std::string_view(name, sizeof name));
        if (id < 0) id = t->find_token(std::string(1, static_cast<char>(b)));
        t->byte_token_[b] = id;
    }
    return t;
}

void SpmTokenizer::push_bytes(std::string_view bytes, std::vector<Token>& out) const {
    for (char c : bytes) {
        Token id = byte_token_[static_cast<uint8_t>(c)];
        if (id < 0) id = unk_;  // a vocabulary without byte tokens
        if (id >= 0) out.push_back(id);
    }
}

void SpmTokenizer::encode_fragment(std::string_view text, std::vector<Token>& out) const {
    std::vector<MergeSymbol> syms;
    syms.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        auto len = static_cast<uint32_t>(
            std::min<size_t>(spm_char_len(static_cast<uint8_t>(text[i])), text.size() - i));
        syms.push_back({find_token(text.substr(i, len)), static_cast<uint32_t>(i), len, 0, 0});
        i += len;
    }
    if (syms.empty()) return;
    link_symbols(syms);
    // Adjacent symbols are adjacent bytes, so a pair's text is a slice of the input.
    merge_symbols(syms, [&](const MergeSymbol& l, const MergeSymbol& r) {
        std::optional<MergeCandidate> c;
        Token id = find_token(text.substr(l.start, l.len + r.len));
        if (id >= 0) c = MergeCandidate{-static_cast<double>(scores_[id]), id};
        return c;
    });
    for (int i = 0; i >= 0; i = syms[i].next) {
        if (syms[i].id >= 0)
            out.push_back(syms[i].id);
        else
            push_bytes(text.substr(syms[i].start, syms[i].len), out);
    }
}

std::vector<Token> SpmTokenizer::encode(std::string_view text, bool add_special,
                                        bool parse_special) const {
    // User-defined tokens are always matched; control and unknown ones only when parsing.
    auto frags = split_on_specials(
        text, specials_, [this](Token id) -> std::string_view { return tokens_[id]; },
        [&](Token id) { return parse_special || attrs_[id] == TokenAttr::UserDefined; }, strip_);

    std::vector<Token> out;
    out.reserve(text.size() / 3 + 2);
    if (add_special && add_bos_) out.push_back(bos_);
    bool after_special = true;  // the input's start counts as one
    // Empty input has no fragment at all, so no space prefix either (llama.cpp).
    if (text.empty()) frags.clear();
    for (const Fragment& f : frags) {
        if (f.id >= 0) {
            out.push_back(f.id);
            after_special = true;
            continue;
        }
        std::string raw;
        if (add_space_prefix_ && after_special) raw = " ";
        raw += f.text;
        encode_fragment(escape_spaces(raw), out);
        after_special = false;
    }
    if (add_special && add_eos_) out.push_back(eos_);
    return out;
}

std::string SpmTokenizer::token_to_piece(Token id, bool render_special) const {
    if (id < 0 || id >= n_vocab()) return {};
    TokenAttr a = attrs_[id];
    if (!render_special && (a == TokenAttr::Control || a == TokenAttr::Unknown)) return {};
    return pieces_[id];
}

std::string SpmTokenizer::decode(std::span<const Token> ids, bool render_special,
                                 bool at_start) const {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
        std::string piece = token_to_piece(ids[i], render_special);
        // The space encode prepended; only the very first token is looked at, even when it
        // renders as nothing (a BOS), as in llama_detokenize.
        if (i == 0 && at_start && add_space_prefix_ && !piece.empty() && piece[0] == ' ')
            piece.erase(0, 1);
        out += piece;
    }
    return out;
}

bool SpmTokenizer::is_eog(Token id) const {
    return id >= 0 && id < n_vocab() && eog_[id];
}

const std::string& SpmTokenizer::token_text(Token id) const {
    static const std::string empty;
    return id >= 0 && id < n_vocab() ? tokens_[id] : empty;
}

TokenAttr SpmTokenizer::token_attr(Token id) const {
    return id >= 0 && id < n_vocab() ? attrs_[id] : TokenAttr::Undefined;
}

Token SpmTokenizer::find_token(std::string_view text) const {
    auto it = text_to_id_.find(text);
    return it == text_to_id_.end() ? -1 : it->second;
}

}  // namespace ferry::tokenizer
