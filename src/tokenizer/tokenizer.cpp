// Reads tokenizer.ggml.* into a BpeVocab or SpmVocab and picks the implementation for the
// model kind.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/special_split.h"
#include "tokenizer/spm_tokenizer.h"

namespace ferry::tokenizer {

namespace {

Expected<std::vector<std::string>> string_array(const gguf::File& f, std::string_view key,
                                                bool required) {
    std::vector<std::string> out;
    const gguf::Array* arr = f.get_array(key);
    if (!arr) {
        if (required) return make_error("{}: missing metadata key {}", f.path(), key);
        return out;
    }
    out.reserve(arr->items.size());
    for (size_t i = 0; i < arr->items.size(); ++i) {
        const std::string* s = arr->items[i].as_string();
        if (!s) return make_error("{}: {}[{}] is not a string", f.path(), key, i);
        out.push_back(*s);
    }
    return out;
}

Token token_id(const gguf::File& f, std::string_view key, Token fallback = -1) {
    auto v = f.get_int(key);
    return v ? static_cast<Token>(*v) : fallback;
}

std::vector<TokenAttr> token_types(const gguf::File& f) {
    std::vector<TokenAttr> attrs;
    if (const gguf::Array* types = f.get_array("tokenizer.ggml.token_type")) {
        attrs.reserve(types->items.size());
        for (const auto& item : types->items) {
            auto t = item.as_int();
            attrs.push_back(t ? static_cast<TokenAttr>(*t) : TokenAttr::Normal);
        }
    }
    return attrs;
}

// Whitespace a special token swallows, which GGUF does not record: llama.cpp sets it by the
// model's name, and a file must tokenize as llama.cpp tokenizes it. Phi-3's tokenizer.json
// rstrips its special tokens but <unk>, <s> and <|endoftext|> (and </s> too).
std::vector<uint8_t> strip_flags(const gguf::File& f, const std::vector<std::string>& tokens,
                                 const std::vector<TokenAttr>& attrs) {
    std::string name = f.get_string("general.name").value_or("");
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (name.find("phi-3") == std::string::npos && name.find("phi3") == std::string::npos)
        return {};
    std::vector<uint8_t> strip(tokens.size(), 0);
    for (size_t i = 0; i < tokens.size() && i < attrs.size(); ++i)
        if (attrs[i] == TokenAttr::Control || attrs[i] == TokenAttr::UserDefined ||
            attrs[i] == TokenAttr::Unknown)
            strip[i] = kRstrip;
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] == "</s>") strip[i] = kRstrip;
        if (tokens[i] == "<unk>" || tokens[i] == "<s>" || tokens[i] == "<|endoftext|>")
            strip[i] = 0;
    }
    return strip;
}

}  // namespace

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& f) {
    auto model = f.get_string("tokenizer.ggml.model");
    if (!model) return make_error("{}: no tokenizer (tokenizer.ggml.model missing)", f.path());
    if (*model == "llama") {
        auto v = read_spm_vocab(f);
        if (!v) return v.error();
        v->strip = strip_flags(f, v->tokens, v->attrs);
        auto spm = SpmTokenizer::create(std::move(v.value()));
        if (!spm) return Error{f.path() + ": " + spm.error().message};
        return std::unique_ptr<Tokenizer>(std::move(spm.value()));
    }
    if (*model != "gpt2")
        return make_error(
            "{}: unsupported tokenizer model '{}' (ferry reads 'gpt2' byte-level BPE and "
            "'llama' SentencePiece BPE)",
            f.path(), *model);

    BpeVocab v;
    auto tokens = string_array(f, "tokenizer.ggml.tokens", true);
    if (!tokens) return tokens.error();
    v.tokens = std::move(tokens.value());
    auto merges = string_array(f, "tokenizer.ggml.merges", true);
    if (!merges) return merges.error();
    v.merges = std::move(merges.value());
    v.attrs = token_types(f);
    v.strip = strip_flags(f, v.tokens, v.attrs);
    v.pre = f.get_string("tokenizer.ggml.pre").value_or("default");
    v.bos = token_id(f, "tokenizer.ggml.bos_token_id");
    v.eos = token_id(f, "tokenizer.ggml.eos_token_id");
    v.unk = token_id(f, "tokenizer.ggml.unknown_token_id");
    v.eot = token_id(f, "tokenizer.ggml.eot_token_id");
    v.eom = token_id(f, "tokenizer.ggml.eom_token_id");
    v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
    v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token");

    auto bpe = BpeTokenizer::create(std::move(v));
    if (!bpe) return Error{f.path() + ": " + bpe.error().message};
    return std::unique_ptr<Tokenizer>(std::move(bpe.value()));
}

std::string Tokenizer::decode(std::span<const Token> ids, bool render_special, bool) const {
    std::string out;
    for (Token id : ids) out += token_to_piece(id, render_special);
    return out;
}

}  // namespace ferry::tokenizer
