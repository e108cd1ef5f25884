#include "tokenizer/utf8.h"

#include <array>

namespace ferry::tokenizer {

int utf8_len(uint8_t lead) {
    if (lead < 0x80) return 1;
    if ((lead & 0xE0) == 0xC0) return 2;
    if ((lead & 0xF0) == 0xE0) return 3;
    if ((lead & 0xF8) == 0xF0) return 4;
    return 1;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

namespace {

// GPT-2's table: printable Latin-1 bytes map to themselves, the other 68 bytes are
// shifted to U+0100.. in byte order.
struct ByteTable {
    std::array<uint32_t, 256> to_cp{};
    std::array<int16_t, 324> from_cp{};  // code points stay below 0x100 + 68
    ByteTable() {
        from_cp.fill(-1);
        uint32_t next = 0x100;
        for (int b = 0; b < 256; ++b) {
            bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
            to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
            from_cp[to_cp[b]] = static_cast<int16_t>(b);
        }
    }
};

const ByteTable& table() {
    static const ByteTable t;
    return t;
}

// Decodes one character at s[i] assuming valid UTF-8 (vocab text is); returns the length.
int decode_at(std::string_view s, size_t i, uint32_t& cp) {
    auto b = static_cast<uint8_t>(s[i]);
    int n = utf8_len(b);
    if (i + n > s.size()) n = 1;
    static constexpr uint8_t kLeadMask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    cp = b & kLeadMask[n];
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
    return n;
}

}  // namespace

std::string bytes_to_unicode(std::string_view raw) {
    const auto& t = table();
    std::string out;
    out.reserve(raw.size() * 2);
    for (char c : raw) append_utf8(out, t.to_cp[static_cast<uint8_t>(c)]);
    return out;
}

std::string unicode_to_bytes(std::string_view text) {
    const auto& t = table();
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        uint32_t cp = 0;
        int n = decode_at(text, i, cp);
        if (cp < t.from_cp.size() && t.from_cp[cp] >= 0)
            out += static_cast<char>(t.from_cp[cp]);
        else
            out.append(text.substr(i, n));
        i += n;
    }
    return out;
}

namespace {

// Length of the valid character at s[i], or 0 when there is none; then `prefix` says how
// many bytes from i form the longest valid start of one (Unicode's "maximal subpart").
int char_at(std::string_view s, size_t i, size_t& prefix) {
    auto b = static_cast<uint8_t>(s[i]);
    prefix = 0;
    if (b < 0x80) return 1;
    int n = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b >= 0xC2 && b <= 0xDF) {
        n = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        n = 3;
        if (b == 0xE0) lo = 0xA0;  // no overlongs
        if (b == 0xED) hi = 0x9F;  // no surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
        n = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
        return 0;
    }
    size_t k = 1;
    for (; k < static_cast<size_t>(n) && i + k < s.size(); ++k) {
        auto c = static_cast<uint8_t>(s[i + k]);
        if (k == 1 ? (c < lo || c > hi) : (c & 0xC0) != 0x80) break;
    }
    prefix = k;
    return k == static_cast<size_t>(n) ? n : 0;
}

}  // namespace

size_t utf8_valid_prefix(std::string_view s) {
    size_t i = 0, prefix = 0;
    while (i < s.size()) {
        int n = char_at(s, i, prefix);
        if (n == 0) break;
        i += n;
    }
    return i;
}

size_t utf8_sanitize(std::string_view s, bool at_end, std::string& out) {
    static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
    size_t i = 0, prefix = 0;
    while (i < s.size()) {
        if (int n = char_at(s, i, prefix); n > 0) {
            out.append(s.substr(i, n));
            i += n;
        } else if (prefix > 0 && i + prefix == s.size() && !at_end) {
            return i;  // a valid beginning that more bytes may complete
        } else {
            out += kReplacement;  // one U+FFFD per maximal subpart
            i += prefix > 0 ? prefix : 1;
        }
    }
    return i;
}

}  // namespace ferry::tokenizer
