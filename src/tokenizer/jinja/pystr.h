// Python's str semantics over UTF-8 bytes. Templates index, slice, strip, split and case-map
// strings the way Python does, by code point and with Unicode whitespace, and a prompt that
// differs by one invisible character is a different prompt; these helpers are that behaviour.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::tokenizer::jinja::pystr {

// Bytes that are not UTF-8 decode to U+DC80 + byte (Python's "surrogateescape") and encode
// back to themselves, so a malformed string survives a round trip unchanged.
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
bool is_ascii(std::string_view s);
size_t length(std::string_view s);  // in code points, as len()

bool isspace(char32_t c);  // str.isspace
char32_t to_lower(char32_t c);
char32_t to_upper(char32_t c);
bool is_cased(char32_t c);

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right);
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);       // str.title
std::string capitalize(std::string_view s);  // str.capitalize
std::string swapcase(std::string_view s);
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// str.find / str.rfind / str.count: a code point index (or -1), as Python returns it.
int64_t find(std::string_view s, std::string_view sub);
int64_t rfind(std::string_view s, std::string_view sub);
int64_t count(std::string_view s, std::string_view sub);
// The predicates answer for a non-empty string whose every code point matches, as Python's.
bool isdigit(std::string_view s);
bool isalpha(std::string_view s);
bool isalnum(std::string_view s);
bool isupper(std::string_view s);
bool islower(std::string_view s);
bool isspace(std::string_view s);

std::string repr(std::string_view s);  // repr(str): quotes and escapes as Python picks them
std::string float_repr(double d);      // repr(float): 1.0, 0.1, 1e+16, inf, nan

}  // namespace ferry::tokenizer::jinja::pystr
