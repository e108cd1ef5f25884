// ferry_fuzz_replay TARGET PATH...: every file under each PATH (a file or a directory) through
// the named harness, as libFuzzer would feed it; a crash or sanitizer report fails the run.
// Lets the ordinary build and ctest replay the corpora without clang.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "fuzz_target.h"

namespace ferry::fuzz {

static std::map<std::string, TargetFn>& targets() {
    static std::map<std::string, TargetFn> t;
    return t;
}

bool register_target(const char* name, TargetFn fn) {
    targets()[name] = fn;
    return true;
}

}  // namespace ferry::fuzz

namespace fs = std::filesystem;

int main(int argc, char** argv) {
    auto& t = ferry::fuzz::targets();
    if (argc < 3 || !t.count(argv[1])) {
        std::fprintf(stderr, "usage: %s TARGET PATH...\ntargets:", argv[0]);
        for (const auto& [name, fn] : t) std::fprintf(stderr, " %s", name.c_str());
        std::fprintf(stderr, "\n");
        return 2;
    }
    std::vector<fs::path> files;
    for (int i = 2; i < argc; ++i) {
        const fs::path p = argv[i];
        if (fs::is_directory(p)) {
            for (const auto& e : fs::recursive_directory_iterator(p))
                if (e.is_regular_file()) files.push_back(e.path());
        } else if (fs::is_regular_file(p)) {
            files.push_back(p);
        } else if (!fs::exists(p)) {
            continue;  // a harness may have no regression inputs yet
        }
    }
    if (files.empty()) {
        std::fprintf(stderr, "%s: no inputs under the paths given\n", argv[1]);
        return 1;
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
        std::ifstream in(f, std::ios::binary);
        std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
        t[argv[1]](reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    }
    std::printf("%s: %zu inputs replayed\n", argv[1], files.size());
    return 0;
}
