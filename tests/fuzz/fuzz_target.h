// One fuzz harness, two builds. With clang's libFuzzer (-DFERRY_FUZZ=ON) FERRY_FUZZ_TARGET
// defines LLVMFuzzerTestOneInput, one executable per harness; in the ordinary build it registers
// the harness under its name in ferry_fuzz_replay, which ctest runs over the seed corpus and the
// regression inputs (tests/fuzz/corpus/<name>, tests/fuzz/regressions/<name>), so an input that
// once crashed stays a test on every machine, sanitizers or not.
//
// A harness returns 0 and must not leak, crash, hang or print per input; rejecting the input
// with an error is the expected outcome for most of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry::fuzz {

using TargetFn = int (*)(const uint8_t* data, size_t size);
bool register_target(const char* name, TargetFn fn);

// Where the repository is (golden files the harnesses load once).
inline std::string source_dir() {
#ifdef FERRY_SOURCE_DIR
    return FERRY_SOURCE_DIR;
#else
    return ".";
#endif
}

}  // namespace ferry::fuzz

#ifdef FERRY_FUZZ_REPLAY
#define FERRY_FUZZ_TARGET(name)                                         \
    static int ferry_fuzz_##name(const uint8_t* data, size_t size);     \
    [[maybe_unused]] static const bool ferry_fuzz_##name##_registered = \
        ferry::fuzz::register_target(#name, ferry_fuzz_##name);         \
    static int ferry_fuzz_##name
#else
#define FERRY_FUZZ_TARGET(name) extern "C" int LLVMFuzzerTestOneInput
#endif
