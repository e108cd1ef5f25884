#include "tokenizer/fim.h"

#include <array>

namespace ferry::tokenizer {

namespace {

// prefix, suffix, middle, one family a row.
constexpr std::array<std::array<std::string_view, 3>, 6> kFamilies = {{
    {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"},  // Qwen2.5-Coder, CodeGemma
    {"<fim_prefix>", "<fim_suffix>", "<fim_middle>"},        // StarCoder, SantaCoder
    {"<fim-prefix>", "<fim-suffix>", "<fim-middle>"},        // Refact
    {"<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"},  // DeepSeek-Coder
    {"<PRE>", "<SUF>", "<MID>"},                             // CodeLlama
    {"▁<PRE>", "▁<SUF>", "▁<MID>"},                          // CodeLlama as SentencePiece stores it
}};

}  // namespace

FimTokens find_fim_tokens(const Tokenizer& t) {
    for (const auto& f : kFamilies) {
        FimTokens k{t.find_token(f[0]), t.find_token(f[1]), t.find_token(f[2])};
        if (k.found()) return k;
    }
    return {};
}

Expected<std::vector<Token>> fim_prompt(const Tokenizer& t, const std::vector<Token>& prefix_ids,
                                        std::string_view suffix) {
    const FimTokens f = find_fim_tokens(t);
    if (!f.found())
        return make_error(
            "this model has no fill-in-the-middle tokens (<|fim_prefix|>, <fim_prefix>, <PRE> "
            "or the like), so it cannot complete between a prompt and a suffix");
    std::vector<Token> ids;
    if (t.add_bos() && t.bos() >= 0) ids.push_back(t.bos());
    ids.push_back(f.prefix);
    ids.insert(ids.end(), prefix_ids.begin(), prefix_ids.end());
    ids.push_back(f.suffix);
    const std::vector<Token> s = t.encode(suffix, false, true);
    ids.insert(ids.end(), s.begin(), s.end());
    ids.push_back(f.middle);
    return ids;
}

}  // namespace ferry::tokenizer
