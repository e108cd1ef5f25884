#include <fstream>
#include <sstream>

#include "cli/commands.h"

namespace ferry::cli {

std::string read_file_or_exit(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ExitError(path + ": cannot be read");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace ferry::cli
