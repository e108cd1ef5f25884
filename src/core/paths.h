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
// A file shipped in the repository's data/ folder (rel: "eval/tasks.jsonl"). Looked for in
// $FERRY_DATA_DIR, then next to the executable (../data from build/ferry in the source tree,
// ../share/ferry/data when installed), then ./data; the error lists where it looked.
Expected<std::string> find_data_file(const std::string& rel);

}  // namespace ferry
