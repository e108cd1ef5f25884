#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.h"

namespace ferry::cli {

std::ifstream open_or_exit(const std::string& path) {
    // An ifstream opens a directory and reads nothing from it: say what it is instead.
    if (std::error_code ec; std::filesystem::is_directory(path, ec))
        throw ExitError(path + ": is a directory");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ExitError(path + ": cannot be read");
    return in;
}

std::string read_file_or_exit(const std::string& path) {
    std::ifstream in = open_or_exit(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

double parse_request_rate(const std::string& s) {
    if (s == "inf") return 0;
    double rate = 0;
    size_t used = 0;
    try {
        rate = std::stod(s, &used);
    } catch (const std::exception&) {
    }
    if (!(rate > 0) || !std::isfinite(rate) || used != s.size())
        throw ExitError(fmt::format("--request-rate: '{}' is not a positive number or inf", s));
    return rate;
}

}  // namespace ferry::cli
