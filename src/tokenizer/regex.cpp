#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace ferry::tokenizer {

std::string white_space_classes(std::string_view p) {
    static constexpr std::string_view kWhiteSpace =
        "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
        "\\x{202F}\\x{205F}\\x{3000}";
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            const char n = p[++i];
            if (n == 's') {
                if (!in_class) out += '[';
                out += kWhiteSpace;
                if (!in_class) out += ']';
            } else if (n == 'S') {
                if (in_class) {
                    out += "\\S\\x{180E}";  // PCRE2's \S leaves U+180E out
                } else {
                    out += "[^";
                    out += kWhiteSpace;
                    out += ']';
                }
            } else if (n == 'Q') {  // \Q...\E is literal text
                const size_t e = p.find("\\E", i + 1);
                const size_t end = e == std::string_view::npos ? p.size() : e + 2;
                out += p.substr(i - 1, end - (i - 1));
                i = end - 1;
            } else {
                out += c;
                out += n;
            }
            continue;
        }
        if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
            const size_t e = p.find(":]", i + 2);
            if (e != std::string_view::npos) {
                out += p.substr(i, e + 2 - i);
                i = e + 1;
                continue;
            }
        }
        out += c;
        if (!in_class && c == '[') {
            in_class = true;
            // A ']' first (after an optional '^') is a member, not the end.
            if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
            if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
        } else if (in_class && c == ']') {
            in_class = false;
        }
    }
    return out;
}

Expected<std::shared_ptr<const Regex>> Regex::compile(std::string_view pattern, bool literal) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    // PCRE2 takes no other option with LITERAL but UTF (and UCP would not matter there).
    uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
    const std::string compiled = literal ? std::string(pattern) : white_space_classes(pattern);
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                     options, &err, &err_off, nullptr);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return make_error("regex '{}' does not compile at {}: {}", pattern, err_off,
                          reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort: interpreter otherwise
    std::shared_ptr<Regex> r(new Regex());
    r->pattern_ = std::string(pattern);
    r->code_ = code;
    return std::shared_ptr<const Regex>(std::move(r));
}

Regex::~Regex() {
    if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
    std::vector<std::pair<size_t, size_t>> out;
    auto* code = static_cast<const pcre2_code*>(code_);
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    while (pos <= text.size()) {
        int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0) break;
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        size_t b = ov[0], e = ov[1];
        out.emplace_back(b, e);
        if (e > b) {
            pos = e;
            continue;
        }
        if (b >= text.size()) break;
        pos = b + 1;  // an empty match: step over one character
        while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
    pcre2_match_data_free(md);
    return out;
}

bool Regex::search(std::string_view text) const {
    auto* code = static_cast<const pcre2_code*>(code_);
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                         PCRE2_NO_UTF_CHECK, md, nullptr);
    pcre2_match_data_free(md);
    return rc >= 0;
}

}  // namespace ferry::tokenizer
