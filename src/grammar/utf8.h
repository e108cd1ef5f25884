// The grammar's two UTF-8 rules, shared by the matcher, the token masks and the regex reader:
// how many bytes follow a lead byte, and whether a decoded value is a character (a Unicode
// scalar in its shortest form: byte tokens can spell overlong forms and surrogates too).
#pragma once

#include <cstdint>

namespace ferry::grammar {

// Continuation bytes after `lead` (0 for ASCII, -1 for a byte that starts no character).
inline int utf8_continuations(unsigned char lead) {
    return lead < 0x80         ? 0
           : (lead >> 5) == 6  ? 1
           : (lead >> 4) == 14 ? 2
           : (lead >> 3) == 30 ? 3
                               : -1;
}

// The smallest value a `len`-byte sequence may encode.
inline uint32_t utf8_min_scalar(int len) {
    return len <= 1 ? 0 : len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
}

inline bool utf8_scalar_ok(uint32_t cp, int len) {
    return cp >= utf8_min_scalar(len) && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
}

}  // namespace ferry::grammar
