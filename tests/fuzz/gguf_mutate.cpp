// Mutation fuzzer for the GGUF reader: random truncations, byte flips and "interesting" integer
// overwrites of the real model's header, each fed to gguf::File::parse. Run it from the
// sanitizer build (-DFERRY_SANITIZE=ON) where any out-of-bounds read or undefined behaviour
// aborts the run; without findings it prints a summary and exits 0.
//
//   ferry_gguf_mutate [iterations=2000] [model.gguf] [seed=1]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "test_util.h"

namespace {

using ferry::gguf::File;

// Only the header region is read (up to the data section start, under 2 MiB for the default
// model); the data section is zero bytes of the right length so that an unharmed tensor table
// is accepted and mutations reach every check, including the tensor range ones.
std::vector<uint8_t> load_header_region(const std::string& path, size_t* header_len) {
    auto f = File::open(path);
    if (!f.ok()) {
        std::fprintf(stderr, "%s\n", f.error().message.c_str());
        std::exit(2);
    }
    *header_len = (*f)->data_offset();
    std::vector<uint8_t> buf((*f)->file_size(), 0);
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(*header_len));
    return buf;
}

// Error messages with the numbers and quoted names removed, to show which checks fired.
std::string error_kind(const std::string& msg) {
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

    // Half the hits go to the structural parts (file header and first keys, tensor table at
    // the end of the header), where a flip changes a count, length, type or offset.
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

}  // namespace

int main(int argc, char** argv) {
    const long iterations = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 2000;
    const std::string path = argc > 2 ? argv[2] : ferry::testing::default_model_path();
    const uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;

    size_t header_len = 0;
    std::vector<uint8_t> buf = load_header_region(path, &header_len);
    Mutator m{std::mt19937_64(seed), buf, header_len, {}};
    long rejected = 0, accepted = 0;
    std::map<std::string, long> kinds;
    for (long i = 0; i < iterations; ++i) {
        const size_t len = m.mutate();
        auto f = File::parse(std::span(buf.data(), len), "mutant.gguf");
        if (f.ok()) {
            ++accepted;
            for (const auto& t : (*f)->tensors()) {
                if (t.data < buf.data() || t.data + t.n_bytes > buf.data() + len) {
                    std::fprintf(stderr, "iteration %ld: tensor '%s' accepted out of range\n", i,
                                 t.name.c_str());
                    return 1;
                }
            }
        } else {
            ++rejected;
            ++kinds[error_kind(f.error().message)];
        }
        m.restore();
    }
    std::printf("%ld inputs, %ld rejected with an error, %ld accepted\n", iterations, rejected,
                accepted);
    std::vector<std::pair<long, std::string>> top;
    for (const auto& [k, n] : kinds) top.emplace_back(n, k);
    std::sort(top.rbegin(), top.rend());
    for (size_t i = 0; i < top.size() && i < 12; ++i)
        std::printf("  %6ld  %s\n", top[i].first, top[i].second.c_str());
    return 0;
}
