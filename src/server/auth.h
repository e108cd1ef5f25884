// API keys: `Authorization: Bearer KEY` compared in constant time, so response timing does not
// leak how much of a guessed key was right.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace ferry::server {

// True when no key is configured, or the header carries exactly that key.
bool authorized(std::string_view authorization_header, const std::string& key);
// The key in a file (first line, surrounding whitespace dropped); empty files are an error.
Expected<std::string> read_key_file(const std::string& path);

}  // namespace ferry::server
