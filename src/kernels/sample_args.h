// What a backend's sample op is told about each row (Backend::sample; kernels/sample_row.h is
// the draw itself): plain structs that device code reads as they are.
#pragma once

#include <cstdint>

namespace ferry::kernels {

// One row's draw, as engine::SamplingParams asks for it.
struct SampleRow {
    float temperature = 0;  // <= 0: greedy (also top_k == 1)
    int32_t top_k = 0;      // <= 0 or >= n_vocab: off
    float top_p = 1;        // >= 1: off
    float min_p = 0;        // <= 0: off
    float repetition_penalty = 1;
    float presence_penalty = 0;
    float frequency_penalty = 0;
    double u = 0;  // uniform in [0, 1) from the sequence's generator; unused when greedy
    int32_t first_edit = 0, n_edits = 0;  // the row's slice of the step's edits
    // Where the row's allowed tokens start in the step's masks (a grammar's: bit i of word
    // i / 64 set for an allowed token, mask_words(n_vocab) words); -1: every token allowed.
    int32_t mask_at = -1;
};

// The 64-bit words of one row's token mask.
constexpr int64_t mask_words(int64_t n_vocab) {
    return (n_vocab + 63) / 64;
}

// A change to one logit before the draw, applied in order: count == 0 adds bias (OpenAI's
// logit_bias), count > 0 applies the penalties for a token seen count times in the window.
struct LogitEdit {
    int32_t id = 0;
    int32_t count = 0;
    float bias = 0;
};

}  // namespace ferry::kernels
