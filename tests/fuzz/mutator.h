// The mutations both parser fuzzers apply (tests/fuzz/*_mutate.cpp): byte flips, "interesting"
// little-endian integers and truncations of a valid file's header region, undone after each
// input, and the error-message reduction that shows which checks fired.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace ferry::fuzz {

// Error messages with the numbers and quoted names removed, to show which checks fired.
inline std::string error_kind(const std::string& msg) {
    std::string out;
    bool quoted = false;
    for (char c : msg.substr(msg.find(": ") + 2)) {
        if (c == '\'') quoted = !quoted;
        if (quoted || (c >= '0' && c <= '9')) continue;
        if (c == '(') break;
        out += c;
    }
    return out.substr(0, 60);
}

struct Mutator {
    std::mt19937_64 rng;
    std::vector<uint8_t>& buf;
    size_t header_len;
    std::vector<std::pair<size_t, uint8_t>> undo;

    // Half the hits go to the structural parts (the start of the header and its end: for GGUF
    // the first keys and the tensor table), where a flip changes a count, length, type or offset.
    size_t pick() {
        switch (rng() % 4) {
            case 0:
                return rng() % std::min<size_t>(header_len, 2048);
            case 1:
                return header_len - 1 - rng() % std::min<size_t>(header_len, 24 * 1024);
            default:
                return rng() % header_len;
        }
    }
    void set(size_t pos, uint8_t v) {
        if (pos >= header_len) return;
        undo.emplace_back(pos, buf[pos]);
        buf[pos] = v;
    }
    void flip_bytes() {
        const int n = 1 + static_cast<int>(rng() % 8);
        for (int i = 0; i < n; ++i) {
            const size_t p = pick();
            set(p, buf[p] ^ static_cast<uint8_t>(1 + rng() % 255));
        }
    }
    void write_interesting() {
        static const uint64_t kValues[] = {0,          1,      2,          3,
                                           4,          5,      9,          13,
                                           31,         33,     0x7F,       0xFF,
                                           0x7FFF,     0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF,
                                           1ull << 32, ~0ull,  1ull << 63, (1ull << 63) - 1};
        const uint64_t v = kValues[rng() % std::size(kValues)];
        const size_t p = pick();
        const int width = 1 << (rng() % 4);  // 1, 2, 4 or 8 bytes, little-endian
        for (int i = 0; i < width; ++i) set(p + i, static_cast<uint8_t>(v >> (8 * i)));
    }
    size_t mutate() {
        switch (rng() % 4) {
            case 0:
                flip_bytes();
                break;
            case 1:
                write_interesting();
                break;
            case 2:
                flip_bytes();
                write_interesting();
                break;
            default:
                return rng() % (rng() % 8 == 0 ? buf.size() + 1 : header_len + 1);
        }
        return buf.size();
    }
    void restore() {
        for (auto it = undo.rbegin(); it != undo.rend(); ++it) buf[it->first] = it->second;
        undo.clear();
    }
};

// The outcome of every input: accepted, or rejected by which check.
struct Tally {
    long accepted = 0, rejected = 0;
    std::map<std::string, long> kinds;

    // Counts one parse result (an Expected of a parsed file with tensors()); false when the file
    // was accepted with a tensor outside the input's [begin, begin + len).
    template <class Parsed>
    bool add(Parsed&& f, long iteration, const uint8_t* begin, size_t len) {
        if (!f.ok()) {
            ++rejected;
            ++kinds[error_kind(f.error().message)];
            return true;
        }
        ++accepted;
        for (const auto& t : (*f)->tensors())
            if (t.data < begin || t.data + t.n_bytes > begin + len) {
                std::fprintf(stderr, "iteration %ld: tensor '%s' accepted out of range\n",
                             iteration, t.name.c_str());
                return false;
            }
        return true;
    }

    void print(long iterations) const {
        std::printf("%ld inputs, %ld rejected with an error, %ld accepted\n", iterations, rejected,
                    accepted);
        std::vector<std::pair<long, std::string>> top;
        for (const auto& [k, n] : kinds) top.emplace_back(n, k);
        std::sort(top.rbegin(), top.rend());
        for (size_t i = 0; i < top.size() && i < 12; ++i)
            std::printf("  %6ld  %s\n", top[i].first, top[i].second.c_str());
    }
};

}  // namespace ferry::fuzz
