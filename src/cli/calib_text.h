// The calibration text that `quantize` (GPTQ, AWQ, SmoothQuant) and `prune` (Wanda, SparseGPT)
// run the model over: --calib FILE, else the text shipped in the repository.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/loaded_model.h"

namespace ferry::cli {

// data/calib/default.txt: from the working directory (the repository root, as the README's
// commands run), else next to a build directory inside it; exits when it is nowhere.
std::string default_calib_path();

// The text at `path` (empty: the default), tokenized by the model, at most max_tokens; exits
// when it is unreadable or (nearly) empty.
std::vector<int32_t> calibration_tokens(const engine::LoadedModel& lm, const std::string& path,
                                        int64_t max_tokens, std::string* used_path = nullptr);

}  // namespace ferry::cli
