#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"

namespace ferry::cli {

std::string read_file_or_exit(const std::string& path) {
    // An ifstream opens a directory and reads nothing from it: say what it is instead.
    if (std::error_code ec; std::filesystem::is_directory(path, ec))
        throw ExitError(path + ": is a directory");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ExitError(path + ": cannot be read");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace ferry::cli
