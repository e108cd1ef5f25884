// The chat page served at `/`: one self-contained HTML file (no build step, no CDN) compiled
// into the binary, so a browser is a client as soon as `ferry serve` runs.
#pragma once

#include <string>

namespace ferry::server {

const std::string& chat_page_html();

}  // namespace ferry::server
