// The frequencies rotary position embedding turns each pair of a head by, with the scalings
// checkpoints declare for a context longer than the one they were trained at: linear (every
// frequency divided by the factor), Llama 3.1's (low frequencies divided, high ones kept, a
// smooth ramp between) and YaRN (the same idea ramped over dimensions by rotation counts, plus
// an attention factor that scales cos and sin). GGUF carries Llama 3.1's as a rope_freqs.weight
// tensor of per-pair divisors instead, as llama.cpp's converter writes it.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace ferry::model {

struct RopeScaling {
    enum class Type { None, Linear, Llama3, Yarn };
    Type type = Type::None;
    double factor = 1;
    // Llama 3.1 (transformers' names): wavelengths above original_ctx / low_freq_factor are
    // divided by factor, those below original_ctx / high_freq_factor kept.
    double low_freq_factor = 1, high_freq_factor = 4;
    int original_ctx = 0;
    // YaRN (transformers' names and defaults): the ramp runs between the dimensions that turn
    // beta_fast and beta_slow times over original_ctx; attention_factor 0: 0.1 ln(factor) + 1.
    double beta_fast = 32, beta_slow = 1, attention_factor = 0;
    bool truncate = true;
};

std::string rope_scaling_name(RopeScaling::Type t);

// Pair i's inverse frequency: theta^(-2i / rope_dim), scaled as `s` says, then divided by
// freq_factors[i] where given (GGUF's rope_freqs.weight; rope_dim / 2 of them).
std::vector<double> rope_inv_freq(int rope_dim, double theta, const RopeScaling& s,
                                  std::span<const float> freq_factors = {});
// What cos and sin are multiplied by: YaRN's attention factor, else 1.
double rope_attention_scale(const RopeScaling& s);
// YaRN's attention factor when a checkpoint gives none: 0.1 ln(factor) + 1 (1 for factor <= 1).
// llama.cpp's rope.scaling.yarn_attn_factor multiplies it.
double yarn_default_attention(double factor);

}  // namespace ferry::model
