#include "core/paths.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace ferry {

std::string ferry_home() {
    if (const char* h = std::getenv("FERRY_HOME"); h && *h) return h;
    const char* home = std::getenv("HOME");
    return std::string(home && *home ? home : "/root") + "/.cache/ferry";
}

std::string default_model_path() {
    return ferry_home() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

Expected<std::string> resolve_model_path(const std::string& spec) {
    if (spec.empty() || spec == "default") {
        std::string p = default_model_path();
        if (!std::filesystem::exists(p))
            return make_error("the default model is not at {}; fetch it with scripts/get-model.sh",
                              p);
        return p;
    }
    std::error_code ec;
    if (!std::filesystem::exists(spec, ec)) return make_error("{}: no such file", spec);
    if (std::filesystem::is_directory(spec, ec) &&
        !std::filesystem::exists(std::filesystem::path(spec) / "config.json", ec))
        return make_error(
            "{}: is a directory without a config.json (not a Hugging Face model "
            "directory)",
            spec);
    return spec;
}

Expected<std::string> find_data_file(const std::string& rel) {
    namespace fs = std::filesystem;
    std::vector<fs::path> dirs;
    if (const char* d = std::getenv("FERRY_DATA_DIR"); d && *d) dirs.emplace_back(d);
    std::error_code ec;
    // The executable's own location, not the current directory, so `ferry` run from anywhere
    // in (or outside) the tree finds the data it was built with.
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        dirs.push_back(exe.parent_path().parent_path() / "data");
        dirs.push_back(exe.parent_path().parent_path() / "share" / "ferry" / "data");
    }
    dirs.emplace_back("data");
    std::string tried;
    for (const fs::path& d : dirs) {
        const fs::path p = d / rel;
        if (fs::is_regular_file(p, ec)) return p.lexically_normal().string();
        tried += (tried.empty() ? "" : ", ") + p.lexically_normal().string();
    }
    return make_error(
        "data file {} not found (looked in {}; set FERRY_DATA_DIR to the "
        "repository's data/ folder)",
        rel, tried);
}

}  // namespace ferry
