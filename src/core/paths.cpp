#include "core/paths.h"

#include <cstdlib>
#include <filesystem>

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
    if (std::filesystem::is_directory(spec, ec)) return make_error("{}: is a directory", spec);
    return spec;
}

}  // namespace ferry
