// Fill-in-the-middle: code models (StarCoder, Qwen2.5-Coder, CodeLlama, DeepSeek-Coder,
// CodeGemma) are trained to read "prefix, suffix, now the middle" through three special tokens.
// A GGUF rarely names them and tokenizer.json never does, so they are found by their text, in
// one family at a time, as llama.cpp finds them.
#pragma once

#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace ferry::tokenizer {

struct FimTokens {
    Token prefix = -1, suffix = -1, middle = -1;
    bool found() const { return prefix >= 0 && suffix >= 0 && middle >= 0; }
};

// The three tokens of the first family the vocabulary has whole; none found: all -1.
FimTokens find_fim_tokens(const Tokenizer& t);

// The prompt in prefix-suffix-middle order, as these models were trained and llama.cpp's
// /infill builds it: [BOS] <prefix> prefix_ids <suffix> suffix's tokens <middle>. prefix_ids
// come without BOS (the caller's text, or ids it chose); an error names the model's lack
// of the tokens.
Expected<std::vector<Token>> fim_prompt(const Tokenizer& t, const std::vector<Token>& prefix_ids,
                                        std::string_view suffix);

}  // namespace ferry::tokenizer
