// Template source → tokens, with jinja2's whitespace control applied the way transformers
// configures it (trim_blocks, lstrip_blocks, `-` and `+` on tags), so the parser sees text
// that is already exactly what will be printed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::tokenizer::jinja {

enum class TokenType {
    Text,        // literal output between tags
    VarBegin,    // {{
    VarEnd,      // }}
    BlockBegin,  // {%
    BlockEnd,    // %}
    Name,
    String,
    Int,
    Float,
    Op,  // punctuation and operators: + - // ** == ( [ { . | , ...
    End,
};

struct Token {
    TokenType type;
    std::string text;  // Text, Name, String (unescaped), Op
    int line = 1;
    int64_t int_value = 0;
    double float_value = 0;
};

// Throws TemplateError (with the line) on an unclosed tag or comment, a bad character or an
// unterminated string.
std::vector<Token> tokenize(std::string_view source);

}  // namespace ferry::tokenizer::jinja
