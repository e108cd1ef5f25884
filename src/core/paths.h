// Where ferry keeps its files: $FERRY_HOME, else ~/.cache/ferry.
#pragma once

#include <string>

#include "core/status.h"

namespace ferry {

std::string ferry_home();
std::string default_model_path();  // the file scripts/get-model.sh caches
// "" or "default" → the default model; anything else is a path. Fails if the file is absent,
// with a hint to run scripts/get-model.sh for the default.
Expected<std::string> resolve_model_path(const std::string& spec);

}  // namespace ferry
