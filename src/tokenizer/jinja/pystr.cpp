#include "tokenizer/jinja/pystr.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace ferry::tokenizer::jinja::pystr {

namespace {

// The length of a well-formed UTF-8 sequence starting at s[i], or 0 if there is none there.
size_t utf8_seq(std::string_view s, size_t i, char32_t& cp) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) {
        cp = b0;
        return 1;
    }
    size_t n;
    char32_t c;
    if ((b0 & 0xE0) == 0xC0) {
        n = 2, c = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
        n = 3, c = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
        n = 4, c = b0 & 0x07;
    } else {
        return 0;
    }
    if (i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
        const auto b = static_cast<unsigned char>(s[i + k]);
        if ((b & 0xC0) != 0x80) return 0;
        c = (c << 6) | (b & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr char32_t min_for_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min_for_len[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    cp = c;
    return n;
}

// Cased letters with a simple one-to-one mapping in the blocks templates meet: Latin-1,
// Latin Extended-A and -B, Latin Extended Additional (Vietnamese), Greek, Cyrillic, fullwidth
// Latin.
// Scripts without case (CJK, Arabic, ...) map to themselves, as in Python.
bool pair_block_upper(char32_t c, char32_t lo, char32_t hi, bool upper_even) {
    return c >= lo && c <= hi && ((c % 2 == 0) == upper_even);
}

}  // namespace

std::u32string decode(std::string_view s) {
    std::u32string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        char32_t cp;
        size_t n = utf8_seq(s, i, cp);
        if (n == 0) {
            out.push_back(0xDC80 + static_cast<unsigned char>(s[i]) - 0x80);
            ++i;
        } else {
            out.push_back(cp);
            i += n;
        }
    }
    return out;
}

void append_utf8(std::string& out, char32_t c) {
    if (c >= 0xDC80 && c <= 0xDCFF) {  // an escaped byte goes back as that byte
        out.push_back(static_cast<char>(c - 0xDC80 + 0x80));
    } else if (c < 0x80) {
        out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (c >> 6)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (c >> 12)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (c >> 18)));
        out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
}

std::string encode(std::u32string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t c : s) append_utf8(out, c);
    return out;
}

bool is_ascii(std::string_view s) {
    for (char c : s)
        if (static_cast<unsigned char>(c) >= 0x80) return false;
    return true;
}

size_t length(std::string_view s) {
    return is_ascii(s) ? s.size() : decode(s).size();
}

bool isspace(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

char32_t to_upper(char32_t c) {
    if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
    if (c == 0xB5) return 0x39C;
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (pair_block_upper(c, 0x100, 0x12F, false) || pair_block_upper(c, 0x132, 0x137, false) ||
        pair_block_upper(c, 0x14A, 0x177, false))
        return c - 1;
    if (pair_block_upper(c, 0x139, 0x148, true) || pair_block_upper(c, 0x179, 0x17E, true))
        return c - 1;
    if (pair_block_upper(c, 0x1E00, 0x1E95, false) || pair_block_upper(c, 0x1EA0, 0x1EFF, false))
        return c - 1;
    // Latin Extended-B: the DŽ/LJ/NJ/DZ digraph triples (upper, title, lower) and the pairs.
    if ((c >= 0x1C4 && c <= 0x1CC) || (c >= 0x1F1 && c <= 0x1F3)) {
        const char32_t first = c >= 0x1F1 ? 0x1F1 : 0x1C4 + (c - 0x1C4) / 3 * 3;
        return first;
    }
    if (pair_block_upper(c, 0x1CD, 0x1DC, true) || pair_block_upper(c, 0x1DE, 0x1EF, false) ||
        pair_block_upper(c, 0x1F8, 0x21F, false))
        return c - 1;
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
    if (c == 0x3C2) return 0x3A3;
    if (c == 0x3AC) return 0x386;
    if (c >= 0x3AD && c <= 0x3AF) return c - 37;
    if (c == 0x3CC) return 0x38C;
    if (c == 0x3CD || c == 0x3CE) return c - 63;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    if (pair_block_upper(c, 0x460, 0x481, false) || pair_block_upper(c, 0x48A, 0x4BF, false) ||
        pair_block_upper(c, 0x4D0, 0x52F, false))
        return c - 1;
    if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
    return c;
}

char32_t to_lower(char32_t c) {
    if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
    if (c == 0x178) return 0xFF;
    if (pair_block_upper(c, 0x100, 0x12F, true) || pair_block_upper(c, 0x132, 0x137, true) ||
        pair_block_upper(c, 0x14A, 0x177, true))
        return c + 1;
    if (pair_block_upper(c, 0x139, 0x148, false) || pair_block_upper(c, 0x179, 0x17E, false))
        return c + 1;
    if (pair_block_upper(c, 0x1E00, 0x1E95, true) || pair_block_upper(c, 0x1EA0, 0x1EFF, true))
        return c + 1;
    if ((c >= 0x1C4 && c <= 0x1CC) || (c >= 0x1F1 && c <= 0x1F3)) {
        const char32_t first = c >= 0x1F1 ? 0x1F1 : 0x1C4 + (c - 0x1C4) / 3 * 3;
        return first + 2;
    }
    if (pair_block_upper(c, 0x1CD, 0x1DC, false) || pair_block_upper(c, 0x1DE, 0x1EF, true) ||
        pair_block_upper(c, 0x1F8, 0x21F, true))
        return c + 1;
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
    if (c == 0x386) return 0x3AC;
    if (c >= 0x388 && c <= 0x38A) return c + 37;
    if (c == 0x38C) return 0x3CC;
    if (c == 0x38E || c == 0x38F) return c + 63;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    if (pair_block_upper(c, 0x460, 0x481, true) || pair_block_upper(c, 0x48A, 0x4BF, true) ||
        pair_block_upper(c, 0x4D0, 0x52F, true))
        return c + 1;
    if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
    return c;
}

bool is_cased(char32_t c) {
    return to_upper(c) != c || to_lower(c) != c || c == 0xDF;
}

namespace {

// Python's special cases that change length: ß upper-cases to SS, İ lower-cases to i + dot.
void append_upper(std::u32string& out, char32_t c) {
    if (c == 0xDF) {
        out += U"SS";
    } else if (c == 0x149) {
        out += U"\u02BCN";
    } else {
        out.push_back(to_upper(c));
    }
}

void append_lower(std::u32string& out, char32_t c) {
    if (c == 0x130) {
        out += U"i\u0307";
    } else {
        out.push_back(to_lower(c));
    }
}

// Greek capital sigma lower-cases to final sigma at the end of a word (Python follows
// Unicode's Final_Sigma rule: a cased letter before it and none after it).
bool final_sigma(const std::u32string& s, size_t i) {
    bool before = false;
    for (size_t k = i; k-- > 0;) {
        if (is_cased(s[k])) {
            before = true;
            break;
        }
        if (s[k] != '\'' && s[k] != 0x2019) break;
    }
    if (!before) return false;
    for (size_t k = i + 1; k < s.size(); ++k) {
        if (is_cased(s[k])) return false;
        if (s[k] != '\'' && s[k] != 0x2019) break;
    }
    return true;
}

std::u32string lower32(const std::u32string& s) {
    std::u32string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == 0x3A3 && final_sigma(s, i))
            out.push_back(0x3C2);
        else
            append_lower(out, s[i]);
    }
    return out;
}

std::u32string to32(const std::optional<std::string>& chars) {
    return chars ? decode(*chars) : std::u32string();
}

bool in_set(char32_t c, const std::optional<std::string>& chars, const std::u32string& set) {
    return chars ? set.find(c) != std::u32string::npos : isspace(c);
}

}  // namespace

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right) {
    if (!chars && is_ascii(s)) {
        constexpr std::string_view ws = " \t\n\r\f\v\x1c\x1d\x1e\x1f";
        size_t b = left ? s.find_first_not_of(ws) : 0;
        if (b == std::string_view::npos) return {};
        size_t e = right ? s.find_last_not_of(ws) + 1 : s.size();
        return std::string(s.substr(b, e - b));
    }
    const std::u32string u = decode(s), set = to32(chars);
    size_t b = 0, e = u.size();
    if (left)
        while (b < e && in_set(u[b], chars, set)) ++b;
    if (right)
        while (e > b && in_set(u[e - 1], chars, set)) --e;
    return encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit) {
    std::vector<std::string> out;
    if (sep) {
        if (sep->empty()) throw std::invalid_argument("empty separator");
        size_t pos = 0;
        while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
            size_t at = s.find(*sep, pos);
            if (at == std::string_view::npos) break;
            out.emplace_back(s.substr(pos, at - pos));
            pos = at + sep->size();
        }
        out.emplace_back(s.substr(pos));
        return out;
    }
    const std::u32string u = decode(s);
    size_t i = 0;
    while (i < u.size()) {
        while (i < u.size() && isspace(u[i])) ++i;
        if (i == u.size()) break;
        if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
            size_t e = u.size();
            while (e > i && isspace(u[e - 1])) --e;
            out.push_back(encode(std::u32string_view(u).substr(i, e - i)));
            return out;
        }
        size_t j = i;
        while (j < u.size() && !isspace(u[j])) ++j;
        out.push_back(encode(std::u32string_view(u).substr(i, j - i)));
        i = j;
    }
    return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit) {
    if (maxsplit < 0) return split(s, sep, maxsplit);
    std::vector<std::string> out;
    if (sep) {
        if (sep->empty()) throw std::invalid_argument("empty separator");
        size_t end = s.size();
        while (int64_t(out.size()) < maxsplit) {
            if (end < sep->size()) break;
            size_t at = s.rfind(*sep, end - sep->size());
            if (at == std::string_view::npos) break;
            out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
            end = at;
        }
        out.emplace_back(s.substr(0, end));
    } else {
        const std::u32string u = decode(s);
        size_t e = u.size();
        while (e > 0) {
            while (e > 0 && isspace(u[e - 1])) --e;
            if (e == 0) break;
            if (int64_t(out.size()) == maxsplit) {
                size_t b = 0;
                while (b < e && isspace(u[b])) ++b;
                out.push_back(encode(std::u32string_view(u).substr(b, e - b)));
                break;
            }
            size_t b = e;
            while (b > 0 && !isspace(u[b - 1])) --b;
            out.push_back(encode(std::u32string_view(u).substr(b, e - b)));
            e = b;
        }
    }
    return {out.rbegin(), out.rend()};
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
    const std::u32string u = decode(s);
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t i = 0; i < u.size(); ++i) {
        const char32_t c = u[i];
        const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C ||
                         c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!brk) continue;
        size_t end = i + 1;
        if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') end = i + 2;
        out.push_back(encode(std::u32string_view(u).substr(start, (keepends ? end : i) - start)));
        start = end;
        i = end - 1;
    }
    if (start < u.size()) out.push_back(encode(std::u32string_view(u).substr(start)));
    return out;
}

std::string upper(std::string_view s) {
    if (is_ascii(s)) {
        std::string out(s);
        for (char& c : out)
            if (c >= 'a' && c <= 'z') c = char(c - 32);
        return out;
    }
    std::u32string out;
    for (char32_t c : decode(s)) append_upper(out, c);
    return encode(out);
}

std::string lower(std::string_view s) {
    if (is_ascii(s)) {
        std::string out(s);
        for (char& c : out)
            if (c >= 'A' && c <= 'Z') c = char(c + 32);
        return out;
    }
    return encode(lower32(decode(s)));
}

std::string title(std::string_view s) {
    std::u32string out;
    bool prev_cased = false;
    for (char32_t c : decode(s)) {
        if (prev_cased)
            append_lower(out, c);
        else if (c == 0xDF)
            out += U"Ss";
        else
            out.push_back(to_upper(c));
        prev_cased = is_cased(c);
    }
    return encode(out);
}

std::string capitalize(std::string_view s) {
    std::u32string u = decode(s), out;
    for (size_t i = 0; i < u.size(); ++i) {
        if (i == 0)
            u[0] == 0xDF ? void(out += U"Ss") : out.push_back(to_upper(u[0]));
        else
            append_lower(out, u[i]);
    }
    return encode(out);
}

std::string swapcase(std::string_view s) {
    std::u32string out;
    for (char32_t c : decode(s)) {
        if (to_lower(c) != c)
            append_lower(out, c);
        else
            append_upper(out, c);
    }
    return encode(out);
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl,
                    int64_t count) {
    std::string out;
    if (old.empty()) {
        // Python inserts the replacement before every code point and at the end.
        const std::u32string u = decode(s);
        int64_t done = 0;
        for (char32_t c : u) {
            if (count < 0 || done < count) out += repl, ++done;
            append_utf8(out, c);
        }
        if (count < 0 || done < count) out += repl;
        return out;
    }
    size_t pos = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
        size_t at = s.find(old, pos);
        if (at == std::string_view::npos) break;
        out.append(s.substr(pos, at - pos));
        out.append(repl);
        pos = at + old.size();
        ++done;
    }
    out.append(s.substr(pos));
    return out;
}

int64_t find(std::string_view s, std::string_view sub) {
    size_t at = s.find(sub);
    return at == std::string_view::npos ? -1 : int64_t(length(s.substr(0, at)));
}

int64_t rfind(std::string_view s, std::string_view sub) {
    size_t at = s.rfind(sub);
    return at == std::string_view::npos ? -1 : int64_t(length(s.substr(0, at)));
}

int64_t count(std::string_view s, std::string_view sub) {
    if (sub.empty()) return int64_t(length(s)) + 1;
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size()))
        ++n;
    return n;
}

namespace {

template <class Pred>
bool all_of(std::string_view s, Pred p) {
    const std::u32string u = decode(s);
    if (u.empty()) return false;
    for (char32_t c : u)
        if (!p(c)) return false;
    return true;
}

bool is_digit(char32_t c) {
    return (c >= '0' && c <= '9') || (c >= 0x660 && c <= 0x669) || (c >= 0xFF10 && c <= 0xFF19);
}

// Letters: cased ones, plus the large caseless scripts (CJK, kana, Hangul, Arabic, Hebrew,
// Devanagari, Thai) by block. Rarely asked of a prompt; close to Python's for those scripts.
bool is_alpha(char32_t c) {
    return is_cased(c) || c == 0xAA || c == 0xBA || (c >= 0x5D0 && c <= 0x5EA) ||
           (c >= 0x620 && c <= 0x64A) || (c >= 0x904 && c <= 0x939) || (c >= 0xE01 && c <= 0xE30) ||
           (c >= 0x3041 && c <= 0x3096) || (c >= 0x30A1 && c <= 0x30FA) ||
           (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7A3);
}

}  // namespace

bool isdigit(std::string_view s) {
    return all_of(s, is_digit);
}
bool isalpha(std::string_view s) {
    return all_of(s, is_alpha);
}
bool isalnum(std::string_view s) {
    return all_of(s, [](char32_t c) { return is_alpha(c) || is_digit(c); });
}
bool isspace(std::string_view s) {
    return all_of(s, [](char32_t c) { return isspace(c); });
}

bool isupper(std::string_view s) {
    bool cased = false;
    for (char32_t c : decode(s)) {
        if (to_upper(c) != c || c == 0xDF) return false;  // a lower-case letter
        if (to_lower(c) != c) cased = true;
    }
    return cased;
}

bool islower(std::string_view s) {
    bool cased = false;
    for (char32_t c : decode(s)) {
        if (to_lower(c) != c) return false;
        if (to_upper(c) != c || c == 0xDF) cased = true;
    }
    return cased;
}

namespace {

// str.isprintable's "no": control and format characters, separators other than the space,
// private use and lone surrogates. Unassigned code points are not tracked.
bool printable(char32_t c) {
    if (c < 0x20 || c == 0x7F) return false;
    if (c < 0x7F) return true;
    if (c >= 0x80 && c <= 0xA0) return false;
    if (c == 0xAD) return false;
    if ((c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x1680)
        return false;
    if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
        (c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F))
        return false;
    if (c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB)) return false;
    if ((c >= 0xD800 && c <= 0xDFFF) || (c >= 0xE000 && c <= 0xF8FF)) return false;
    if (c >= 0xF0000) return false;
    return true;
}

}  // namespace

std::string repr(std::string_view s) {
    const bool has_single = s.find('\'') != std::string_view::npos;
    const bool has_double = s.find('"') != std::string_view::npos;
    const char q = has_single && !has_double ? '"' : '\'';
    std::string out(1, q);
    char buf[16];
    for (char32_t c : decode(s)) {
        if (c == static_cast<char32_t>(q) || c == '\\') {
            out.push_back('\\');
            out.push_back(static_cast<char>(c));
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (printable(c)) {
            append_utf8(out, c);
        } else {
            if (c < 0x100)
                std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
            else if (c < 0x10000)
                std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
            else
                std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(c));
            out += buf;
        }
    }
    out.push_back(q);
    return out;
}

std::string float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    // The shortest digits that round-trip, then Python's layout: positional for decimal
    // exponents in [-4, 16), scientific otherwise, and always a ".0" on an integral value.
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string sci(buf, r.ptr);
    std::string sign;
    if (sci[0] == '-') sign = "-", sci.erase(0, 1);
    const size_t e = sci.find('e');
    std::string digits = sci.substr(0, e);
    const int exp = std::stoi(sci.substr(e + 1));
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    if (exp >= -4 && exp < 16) {
        std::string out;
        if (exp < 0) {
            out = "0." + std::string(size_t(-exp - 1), '0') + digits;
        } else if (size_t(exp) + 1 >= digits.size()) {
            out = digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
        } else {
            out = digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
        }
        return sign + out;
    }
    std::string mant = digits.substr(0, 1);
    if (digits.size() > 1) mant += "." + digits.substr(1);
    std::snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return sign + mant + buf;
}

}  // namespace ferry::tokenizer::jinja::pystr
