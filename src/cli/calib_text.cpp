#include "cli/calib_text.h"

#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"

namespace ferry::cli {

std::string default_calib_path() {
    const std::string rel = "data/calib/default.txt";
    std::vector<std::string> candidates = {rel};
    if (const char* src = std::getenv("FERRY_SOURCE_DIR"))
        candidates.push_back(std::string(src) + "/" + rel);
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) candidates.push_back((exe.parent_path().parent_path() / rel).string());
    for (const std::string& p : candidates)
        if (std::filesystem::is_regular_file(p, ec)) return p;
    throw ExitError(
        "the default calibration text data/calib/default.txt was not found; pass --calib FILE");
}

std::vector<int32_t> calibration_tokens(const engine::LoadedModel& lm, const std::string& path,
                                        int64_t max_tokens, std::string* used_path) {
    const std::string p = path.empty() ? default_calib_path() : path;
    std::vector<int32_t> tokens = lm.tokenizer->encode(read_file_or_exit(p), true);
    if (static_cast<int64_t>(tokens.size()) > max_tokens)
        tokens.resize(static_cast<size_t>(max_tokens));
    if (tokens.size() < 2) throw ExitError(p + ": the calibration text is (nearly) empty");
    if (used_path) *used_path = p;
    return tokens;
}

}  // namespace ferry::cli
