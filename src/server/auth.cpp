#include "server/auth.h"

#include <cctype>
#include <fstream>

namespace ferry::server {

namespace {
bool equal_ct(std::string_view a, std::string_view b) {
    // Length leaks, content does not; keys are not secret in length.
    if (a.size() != b.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}
}  // namespace

bool authorized(std::string_view h, const std::string& key) {
    if (key.empty()) return true;
    constexpr std::string_view kBearer = "Bearer ";
    if (h.size() < kBearer.size()) return false;
    for (size_t i = 0; i < kBearer.size(); ++i)
        if (std::tolower((unsigned char)h[i]) != std::tolower((unsigned char)kBearer[i]))
            return false;
    h.remove_prefix(kBearer.size());
    while (!h.empty() && (h.front() == ' ' || h.front() == '\t')) h.remove_prefix(1);
    while (!h.empty() && (h.back() == ' ' || h.back() == '\t')) h.remove_suffix(1);
    return equal_ct(h, key);
}

Expected<std::string> read_key_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) return make_error("{}: cannot be read", path);
    std::string line;
    std::getline(in, line);
    const char* ws = " \t\r\n";
    auto b = line.find_first_not_of(ws);
    if (b == std::string::npos) return make_error("{}: no API key in the first line", path);
    return line.substr(b, line.find_last_not_of(ws) - b + 1);
}

}  // namespace ferry::server
