// `ferry quantize --auto-mixed --budget BITS`: a type per matrix. Each matrix the model can swap
// (the layers' q/k/v/o/gate/up/down, the embedding and the output head) is tried at every
// candidate type on the calibration text (calibrate/sensitivity.h), then the types are chosen
// to minimise the summed KL with the whole file within BITS per weight
// (calibrate/mixed_precision.h). Tensors outside the mix (norms, --keep, --keep-f16) count
// against the budget at the size they will be written.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "engine/loaded_model.h"
#include "gguf/gguf_writer.h"

namespace ferry::cli {

struct MixedPlan {
    std::map<std::string, DType> types;  // every mixed matrix's type
    double bits_per_weight = 0;          // the whole file's, as planned
    // Summed single-matrix KLs: the plan's, and each candidate's alone where every mixed
    // matrix takes it (what the allocation traded against).
    double kl_sum = 0;
    std::vector<std::pair<DType, double>> uniform_kl_sums;
};

// `fixed(name, n_dims, row)` gives the type of a tensor outside the mix (nullopt: in the mix;
// a tensor kept at its input type answers that type). Candidates that a matrix's rows do not
// split into take quant::fallback_for's type. The tokens run in windows of `window`, each from
// an empty cache. Exits with a message on any error.
MixedPlan plan_auto_mixed(
    engine::LoadedModel& lm, std::span<const DType> candidates, double budget_bpw,
    std::span<const int32_t> tokens, int window,
    const std::function<std::optional<DType>(const std::string&, size_t, int64_t)>& fixed,
    bool progress);

// About n tokens of `text` as windows of `window` consecutive tokens, evenly spaced from its start
// to its end (all of it when it is shorter): a text's first tokens are one kind of writing, and a
// mix measured on them does worse on others.
std::vector<int32_t> spread_windows(const std::vector<int32_t>& text, int64_t n, int window);

// What the plan chose, for the terminal: overall, then by kind of matrix (a layer's "ffn_down",
// "token_embd"), which is where the sensitive ones show.
std::vector<std::string> describe(const MixedPlan& plan);

// llama_ftype has no value for a mix: general.file_type goes, ferry.weight_type says "mixed",
// ferry.mixed.budget_bpw and ferry.mixed.types what was asked.
void set_mixed_metadata(gguf::Writer& w, double budget_bpw, std::span<const DType> candidates);

}  // namespace ferry::cli
