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

#include "core/paths.h"
#include "gguf/gguf_file.h"
#include "mutator.h"

namespace {

using ferry::fuzz::Mutator;
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

}  // namespace

int main(int argc, char** argv) {
    const long iterations = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 2000;
    const std::string path = argc > 2 ? argv[2] : ferry::default_model_path();
    const uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;

    size_t header_len = 0;
    std::vector<uint8_t> buf = load_header_region(path, &header_len);
    Mutator m{std::mt19937_64(seed), buf, header_len, {}};
    ferry::fuzz::Tally tally;
    for (long i = 0; i < iterations; ++i) {
        const size_t len = m.mutate();
        if (!tally.add(File::parse(std::span(buf.data(), len), "mutant.gguf"), i, buf.data(), len))
            return 1;
        m.restore();
    }
    tally.print(iterations);
    return 0;
}
