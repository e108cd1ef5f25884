// Small string helpers shared across folders.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace ferry {

// ASCII lower-case copy, for case-insensitive names (devices, presets, formats).
inline std::string ascii_lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

}  // namespace ferry
