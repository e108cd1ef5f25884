// UTF-8 helpers and GPT-2's byte<->unicode mapping, which lets byte-level BPE store every
// byte as a printable character in the vocabulary text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::tokenizer {

// Length of the UTF-8 sequence a lead byte announces (1 for invalid leads, so callers
// always make progress).
int utf8_len(uint8_t lead);
void append_utf8(std::string& out, uint32_t cp);

// Each byte of `raw` mapped to its GPT-2 stand-in character, e.g. ' ' -> "Ġ".
std::string bytes_to_unicode(std::string_view raw);
// The inverse; characters outside the mapping are kept as their UTF-8 bytes.
std::string unicode_to_bytes(std::string_view text);

// How many leading bytes of `s` are valid UTF-8.
size_t utf8_valid_prefix(std::string_view s);
// Replaces invalid sequences with U+FFFD (per the WHATWG "maximal subpart" rule) and stops
// before a valid unfinished tail unless `at_end`, where the tail also becomes U+FFFD.
// Returns the number of input bytes consumed.
size_t utf8_sanitize(std::string_view s, bool at_end, std::string& out);

}  // namespace ferry::tokenizer
