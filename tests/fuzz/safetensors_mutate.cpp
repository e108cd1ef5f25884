// Mutation fuzzer for the safetensors reader: a valid file (tensors of every dtype class, a
// metadata block, data of the declared sizes) whose JSON header gets its numbers, strings and
// structure edited, and whose bytes get flips, interesting integers (the 8-byte length prefix
// included) and truncations, each fed to hf::SafetensorsFile::parse. Run it from the sanitizer
// build (-DFERRY_SANITIZE=ON) where any out-of-bounds read or undefined behaviour aborts the
// run; an accepted file whose tensor lies outside the input also fails it.
//
//   ferry_safetensors_mutate [iterations=2000] [seed=1]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hf/safetensors.h"
#include "mutator.h"

namespace {

using ferry::fuzz::Mutator;
using ferry::hf::SafetensorsFile;

struct Spec {
    const char* name;
    const char* dtype;
    std::vector<int64_t> shape;
    int elem;
};

// The header text and the file's total size for the valid starting point.
std::string valid_header(size_t* data_len) {
    const std::vector<Spec> specs = {
        {"model.embed_tokens.weight", "BF16", {64, 16}, 2},
        {"model.layers.0.self_attn.q_proj.weight", "F16", {16, 16}, 2},
        {"model.layers.0.input_layernorm.weight", "F32", {16}, 4},
        {"model.layers.0.mlp.up_proj.weight", "F32", {32, 16}, 4},
        {"scalar", "F64", {}, 8},
        {"ids", "I64", {3}, 8},
        {"mask", "BOOL", {5}, 1},
        {"fp8", "F8_E4M3", {4, 4}, 1},
        {"empty", "I8", {0, 7}, 1},
        {"counts", "I32", {2, 2}, 4},
    };
    nlohmann::json h;
    h["__metadata__"] = {{"format", "pt"}};
    size_t off = 0;
    for (const Spec& s : specs) {
        size_t n = s.elem;
        for (int64_t d : s.shape) n *= static_cast<size_t>(d);
        h[s.name] = {{"dtype", s.dtype}, {"shape", s.shape}, {"data_offsets", {off, off + n}}};
        off += n;
    }
    *data_len = off;
    std::string text = h.dump();
    while (text.size() % 8) text += ' ';
    return text;
}

std::vector<uint8_t> file_of(const std::string& header, size_t data_len, uint64_t declared) {
    std::vector<uint8_t> out(8 + header.size() + data_len, 0);
    for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(declared >> (8 * i));
    std::copy(header.begin(), header.end(), out.begin() + 8);
    return out;
}

// One edit of the header's text where the JSON stays (mostly) well formed, so the reader's
// checks beyond the JSON parser are reached: a number, a dtype or a key replaced, a span cut.
std::string edit_header(std::string h, std::mt19937_64& rng) {
    static const char* kNumbers[] = {"0",
                                     "1",
                                     "-1",
                                     "7",
                                     "4294967296",
                                     "18446744073709551615",
                                     "18446744073709551616",
                                     "9223372036854775807",
                                     "1e30",
                                     "2.5",
                                     "-9223372036854775808",
                                     "64",
                                     "65",
                                     "1023",
                                     "null",
                                     "\"3\""};
    static const char* kStrings[] = {"\"F32\"",
                                     "\"BF16\"",
                                     "\"F8_E5M2\"",
                                     "\"Q4_0\"",
                                     "\"\"",
                                     "\"U8\"",
                                     "\"data_offsets\"",
                                     "\"shape\"",
                                     "\"dtype\"",
                                     "\"__metadata__\"",
                                     "[]",
                                     "{}",
                                     "[1,2]",
                                     "1"};
    const int what = static_cast<int>(rng() % 4);
    if (what == 0 || what == 1) {
        // Replace the n-th number.
        std::vector<std::pair<size_t, size_t>> nums;
        for (size_t i = 0; i < h.size();) {
            if ((h[i] >= '0' && h[i] <= '9') || (h[i] == '-' && i + 1 < h.size())) {
                size_t j = i + 1;
                while (j < h.size() && h[j] >= '0' && h[j] <= '9') ++j;
                nums.emplace_back(i, j - i);
                i = j;
            } else {
                ++i;
            }
        }
        if (nums.empty()) return h;
        auto [p, n] = nums[rng() % nums.size()];
        return h.replace(p, n, kNumbers[rng() % std::size(kNumbers)]);
    }
    if (what == 2) {
        // Replace the n-th string.
        std::vector<std::pair<size_t, size_t>> strs;
        for (size_t i = 0; i < h.size(); ++i)
            if (h[i] == '"') {
                size_t j = h.find('"', i + 1);
                if (j == std::string::npos) break;
                strs.emplace_back(i, j - i + 1);
                i = j;
            }
        if (strs.empty()) return h;
        auto [p, n] = strs[rng() % strs.size()];
        return h.replace(p, n, kStrings[rng() % std::size(kStrings)]);
    }
    // Cut a span (drops a key, a bracket, a comma).
    const size_t p = rng() % h.size();
    return h.erase(p, 1 + rng() % 12);
}

}  // namespace

int main(int argc, char** argv) {
    const long iterations = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 2000;
    const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
    std::mt19937_64 rng(seed);

    size_t data_len = 0;
    const std::string header = valid_header(&data_len);
    if (!SafetensorsFile::parse(file_of(header, data_len, header.size()), "valid").ok()) {
        std::fprintf(stderr, "the starting file is not accepted\n");
        return 2;
    }
    ferry::fuzz::Tally tally;
    for (long i = 0; i < iterations; ++i) {
        std::vector<uint8_t> buf;
        size_t len = 0;
        if (rng() % 2) {
            const std::string h = edit_header(header, rng);
            // Mostly the honest length; sometimes the old one, so the JSON is cut or overrun.
            buf = file_of(h, data_len, rng() % 4 ? h.size() : header.size());
            len = buf.size();
        } else {
            buf = file_of(header, data_len, header.size());
            Mutator m{std::mt19937_64(rng()), buf, 8 + header.size(), {}};
            len = m.mutate();
        }
        if (!tally.add(SafetensorsFile::parse(std::span(buf.data(), len), "mutant.safetensors"), i,
                       buf.data(), len))
            return 1;
    }
    tally.print(iterations);
    return 0;
}
