#include "tokenizer/jinja/lexer.h"

#include <cerrno>
#include <cstdlib>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/pystr.h"

namespace ferry::tokenizer::jinja {

namespace {

// jinja2 reads the source with every \r\n and \r as \n and drops one trailing newline
// (keep_trailing_newline is off in transformers).
std::string normalize_newlines(std::string_view src) {
    std::string out;
    out.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
        if (src[i] == '\r') {
            out.push_back('\n');
            if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
        } else {
            out.push_back(src[i]);
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

// Python's \s: Unicode whitespace, read as UTF-8 at byte offset i; returns its length or 0.
size_t space_at(std::string_view s, size_t i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) return pystr::isspace(char32_t(b)) ? 1 : 0;
    size_t n = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
    if (i + n > s.size()) return 0;
    std::u32string u = pystr::decode(s.substr(i, n));
    return u.size() == 1 && pystr::isspace(u[0]) ? n : 0;
}

std::string rstrip_unicode(std::string_view s) {
    return pystr::strip(s, std::nullopt, false, true);
}

bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
    return is_name_start(c) || (c >= '0' && c <= '9');
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

class Lexer {
  public:
    explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {}

    std::vector<Token> run() {
        while (pos_ < src_.size()) {
            size_t start = find_tag(pos_);
            if (start == std::string::npos) {
                emit_text(src_.substr(pos_), line_);
                advance_to(src_.size());
                break;
            }
            const char kind = src_[start + 1];
            const char sign =
                start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+')
                    ? src_[start + 2]
                    : 0;
            const int text_line = line_;
            std::string text = src_.substr(pos_, start - pos_);
            emit_text(strip_before_tag(std::move(text), kind, sign), text_line);
            advance_to(start);
            const int tag_line = line_;
            advance_to(start + 2 + (sign ? 1 : 0));
            if (kind == '#') {
                lex_comment(tag_line);
            } else if (kind == '%' && at_raw()) {
                lex_raw(tag_line);
            } else {
                lex_tag(kind, tag_line);
            }
        }
        out_.push_back(Token{TokenType::End, {}, line_});
        return std::move(out_);
    }

  private:
    std::string src_;
    size_t pos_ = 0;
    int line_ = 1;
    // Whether the text that follows starts a line: lstrip_blocks only strips the indentation of
    // a tag that the line holds alone (jinja2's `line_starting`).
    bool line_starting_ = true;
    std::vector<Token> out_;

    void advance_to(size_t p) {
        for (size_t i = pos_; i < p; ++i)
            if (src_[i] == '\n') ++line_;
        pos_ = p;
    }

    size_t find_tag(size_t from) const {
        for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
            if (i + 1 < src_.size() &&
                (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
                return i;
        return std::string::npos;
    }

    std::string strip_before_tag(std::string text, char kind, char sign) const {
        if (sign == '-') return rstrip_unicode(text);
        if (sign == '+' || kind == '{') return text;
        // lstrip_blocks: spaces and tabs between the line's start and a block or comment tag.
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if (l_pos > 0 || line_starting_) {
            if (text.find_first_not_of(" \t", l_pos) == std::string::npos) text.resize(l_pos);
        }
        return text;
    }

    void emit_text(std::string text, int line) {
        if (!text.empty()) out_.push_back(Token{TokenType::Text, std::move(text), line});
    }

    void skip_spaces() {
        while (pos_ < src_.size()) {
            size_t n = space_at(src_, pos_);
            if (!n) break;
            advance_to(pos_ + n);
        }
    }

    // After a tag's closing delimiter: `-` eats all whitespace, trim_blocks one newline after a
    // block or comment (not after `+`, not after {{ }}).
    void after_tag_end(char end_sign, bool block_like) {
        const size_t before = pos_;
        if (end_sign == '-') {
            skip_spaces();
        } else if (end_sign != '+' && block_like && pos_ < src_.size() && src_[pos_] == '\n') {
            advance_to(pos_ + 1);
        }
        line_starting_ = pos_ > before ? src_[pos_ - 1] == '\n' : false;
    }

    void lex_comment(int tag_line) {
        size_t end = src_.find("#}", pos_);
        if (end == std::string::npos) throw TemplateError("unclosed comment '{#'", tag_line);
        const char end_sign =
            end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
        advance_to(end + 2);
        after_tag_end(end_sign, true);
    }

    bool at_raw() const {
        size_t p = pos_;
        while (p < src_.size() && space_at(src_, p)) p += space_at(src_, p);
        return src_.compare(p, 3, "raw") == 0 &&
               (p + 3 >= src_.size() || !is_name_char(src_[p + 3]));
    }

    // Matches [-+]?%} at p (after optional spaces); returns the position after it and the sign.
    bool block_end_at(size_t p, size_t& after, char& sign) const {
        while (p < src_.size() && space_at(src_, p)) p += space_at(src_, p);
        sign = 0;
        if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
        if (src_.compare(p, 2, "%}") != 0) return false;
        after = p + 2;
        return true;
    }

    void lex_raw(int tag_line) {
        size_t p = pos_;
        while (space_at(src_, p)) p += space_at(src_, p);
        p += 3;  // "raw"
        size_t after;
        char sign;
        if (!block_end_at(p, after, sign) || sign == '+')
            throw TemplateError("malformed '{% raw %}' tag", tag_line);
        advance_to(after);
        // The raw tag's own end takes no trim_blocks newline (jinja2's rule), only `-`.
        after_tag_end(sign == '-' ? '-' : '+', true);
        for (size_t at = src_.find("{%", pos_); at != std::string::npos;
             at = src_.find("{%", at + 1)) {
            size_t q = at + 2;
            char open_sign = 0;
            if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) open_sign = src_[q++];
            while (q < src_.size() && space_at(src_, q)) q += space_at(src_, q);
            if (src_.compare(q, 6, "endraw") != 0) continue;
            char end_sign;
            if (!block_end_at(q + 6, after, end_sign)) continue;
            const int text_line = line_;
            emit_text(strip_before_tag(src_.substr(pos_, at - pos_), '%', open_sign), text_line);
            advance_to(after);
            after_tag_end(end_sign, true);
            return;
        }
        throw TemplateError("unclosed '{% raw %}' block (no '{% endraw %}')", tag_line);
    }

    void lex_tag(char kind, int tag_line) {
        const bool block = kind == '%';
        out_.push_back(Token{block ? TokenType::BlockBegin : TokenType::VarBegin, {}, tag_line});
        int depth = 0;  // brackets open inside the tag: `}}` in `{'a': {'b': 1}}` is not the end
        for (;;) {
            skip_spaces();
            if (pos_ >= src_.size())
                throw TemplateError(block ? "unclosed block tag '{%' (no '%}')"
                                          : "unclosed expression '{{' (no '}}')",
                                    tag_line);
            if (depth == 0) {
                const char c = src_[pos_];
                char end_sign = 0;
                size_t len = 0;
                const std::string_view rest = std::string_view(src_).substr(pos_);
                if (block) {
                    if (rest.starts_with("%}"))
                        len = 2;
                    else if (rest.starts_with("-%}") || rest.starts_with("+%}"))
                        len = 3, end_sign = c;
                } else {
                    if (rest.starts_with("}}"))
                        len = 2;
                    else if (rest.starts_with("-}}"))
                        len = 3, end_sign = '-';
                }
                if (len) {
                    out_.push_back(
                        Token{block ? TokenType::BlockEnd : TokenType::VarEnd, {}, line_});
                    advance_to(pos_ + len);
                    after_tag_end(end_sign, block);
                    return;
                }
            }
            lex_token(depth);
        }
    }

    void lex_token(int& depth) {
        const char c = src_[pos_];
        const int line = line_;
        if (is_name_start(c)) {
            size_t e = pos_;
            while (e < src_.size() && is_name_char(src_[e])) ++e;
            out_.push_back(Token{TokenType::Name, src_.substr(pos_, e - pos_), line});
            advance_to(e);
            return;
        }
        if (is_digit(c)) {
            lex_number();
            return;
        }
        if (c == '\'' || c == '"') {
            lex_string();
            return;
        }
        static constexpr std::string_view two[] = {"//", "**", "==", "!=", "<=", ">="};
        for (std::string_view op : two) {
            if (std::string_view(src_).substr(pos_).starts_with(op)) {
                out_.push_back(Token{TokenType::Op, std::string(op), line});
                advance_to(pos_ + 2);
                return;
            }
        }
        constexpr std::string_view one = "+-/*%~[](){}<>=.:|,;";
        if (one.find(c) != std::string_view::npos) {
            if (c == '(' || c == '[' || c == '{') ++depth;
            if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
            out_.push_back(Token{TokenType::Op, std::string(1, c), line});
            advance_to(pos_ + 1);
            return;
        }
        throw TemplateError(fmt::format("unexpected character '{}' in a tag",
                                        pystr::encode(pystr::decode(src_.substr(pos_, 1)))),
                            line);
    }

    // 0x1f, 0o17, 0b101 (any case, underscores between digits), as jinja2 reads them.
    bool lex_prefixed_int() {
        if (src_[pos_] != '0' || pos_ + 2 >= src_.size()) return false;
        const char k = char(src_[pos_ + 1] | 0x20);
        const int base = k == 'x' ? 16 : k == 'o' ? 8 : k == 'b' ? 2 : 0;
        if (!base) return false;
        auto value = [&](size_t p) {
            if (p >= src_.size()) return -1;
            const char c = src_[p], l = char(c | 0x20);
            const int v = is_digit(c) ? c - '0' : (l >= 'a' && l <= 'f') ? l - 'a' + 10 : -1;
            return v < base ? v : -1;
        };
        std::string text;
        size_t q = pos_ + 2;
        while (value(q) >= 0 || (q < src_.size() && src_[q] == '_' && value(q + 1) >= 0))
            if (src_[q++] != '_') text.push_back(src_[q - 1]);
        if (text.empty()) return false;
        errno = 0;
        Token t{TokenType::Int, src_.substr(pos_, q - pos_), line_};
        t.int_value = std::strtoll(text.c_str(), nullptr, base);
        if (errno == ERANGE)
            throw TemplateError("integer literal " + t.text + " is too large", line_);
        out_.push_back(std::move(t));
        advance_to(q);
        return true;
    }

    void lex_number() {
        if (lex_prefixed_int()) return;
        const int line = line_;
        size_t e = pos_;
        auto digits = [&](size_t& p) {
            while (p < src_.size() &&
                   (is_digit(src_[p]) ||
                    (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1]))))
                ++p;
        };
        digits(e);
        bool is_float = false;
        // "a.0.1" is attribute access, not a float (jinja2's lookbehind on '.').
        const bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';
        if (!after_dot) {
            if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
                ++e;
                digits(e);
                is_float = true;
            }
            if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
                size_t q = e + 1;
                if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
                if (q < src_.size() && is_digit(src_[q])) {
                    e = q;
                    digits(e);
                    is_float = true;
                }
            }
        }
        std::string text;
        for (size_t i = pos_; i < e; ++i)
            if (src_[i] != '_') text.push_back(src_[i]);
        Token t{is_float ? TokenType::Float : TokenType::Int, text, line};
        if (is_float) {
            t.float_value = std::strtod(text.c_str(), nullptr);
        } else {
            errno = 0;
            t.int_value = std::strtoll(text.c_str(), nullptr, 10);
            if (errno == ERANGE)
                throw TemplateError("integer literal " + text + " is too large", line);
        }
        out_.push_back(std::move(t));
        advance_to(e);
    }

    // Python's unicode-escape, as jinja2 decodes string literals; an unknown escape keeps its
    // backslash.
    void lex_string() {
        const int line = line_;
        const char q = src_[pos_];
        std::string out;
        size_t i = pos_ + 1;
        for (;;) {
            if (i >= src_.size()) throw TemplateError("unterminated string literal", line);
            const char c = src_[i];
            if (c == q) break;
            if (c != '\\') {
                out.push_back(c);
                ++i;
                continue;
            }
            if (i + 1 >= src_.size()) throw TemplateError("unterminated string literal", line);
            const char e = src_[i + 1];
            i += 2;
            switch (e) {
                case '\n':
                    break;
                case '\\':
                case '\'':
                case '"':
                    out.push_back(e);
                    break;
                case 'a':
                    out.push_back('\a');
                    break;
                case 'b':
                    out.push_back('\b');
                    break;
                case 'f':
                    out.push_back('\f');
                    break;
                case 'n':
                    out.push_back('\n');
                    break;
                case 'r':
                    out.push_back('\r');
                    break;
                case 't':
                    out.push_back('\t');
                    break;
                case 'v':
                    out.push_back('\v');
                    break;
                case 'x':
                case 'u':
                case 'U': {
                    const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                    char32_t cp = 0;
                    for (int k = 0; k < n; ++k) {
                        const int h = i + k < src_.size() ? hex_value(src_[i + k]) : -1;
                        if (h < 0)
                            throw TemplateError(fmt::format("truncated \\{} escape in a string", e),
                                                line);
                        cp = cp * 16 + char32_t(h);
                    }
                    if (cp > 0x10FFFF)
                        throw TemplateError("\\U escape past U+10FFFF in a string", line);
                    pystr::append_utf8(out, cp);
                    i += n;
                    break;
                }
                case 'N':
                    throw TemplateError("\\N{...} escapes are not supported in strings", line);
                default:
                    if (e >= '0' && e <= '7') {
                        char32_t cp = char32_t(e - '0');
                        for (int k = 0;
                             k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i)
                            cp = cp * 8 + char32_t(src_[i] - '0');
                        pystr::append_utf8(out, cp);
                    } else {
                        out.push_back('\\');
                        out.push_back(e);
                    }
            }
        }
        out_.push_back(Token{TokenType::String, std::move(out), line});
        advance_to(i + 1);
    }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
    return Lexer(source).run();
}

}  // namespace ferry::tokenizer::jinja
