#include "server/auth.h"

#include <cctype>
#include <fstream>

namespace ferry::server {

namespace {
// The time depends on the key's length only: every byte of the key is compared whatever the
// guess holds or how long it is, so a 401 says nothing about how much of a guess was right.
bool equal_ct(std::string_view guess, std::string_view key) {
    size_t diff = guess.size() ^ key.size();
    for (size_t i = 0; i < key.size(); ++i)
        diff |= static_cast<unsigned char>((i < guess.size() ? guess[i] : '\0') ^ key[i]);
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
