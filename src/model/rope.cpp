#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ferry::model {

std::string rope_scaling_name(RopeScaling::Type t) {
    switch (t) {
        case RopeScaling::Type::Linear:
            return "linear";
        case RopeScaling::Type::Llama3:
            return "llama3";
        case RopeScaling::Type::Yarn:
            return "yarn";
        default:
            return "none";
    }
}

double rope_attention_scale(const RopeScaling& s) {
    if (s.type != RopeScaling::Type::Yarn) return 1.0;
    if (s.attention_factor > 0) return s.attention_factor;
    return yarn_default_attention(s.factor);
}

double yarn_default_attention(double factor) {
    return factor <= 1 ? 1.0 : 0.1 * std::log(factor) + 1.0;
}

std::vector<double> rope_inv_freq(int rope_dim, double theta, const RopeScaling& s,
                                  std::span<const float> freq_factors) {
    std::vector<double> f(static_cast<size_t>(rope_dim / 2));
    // YaRN's ramp over pair indices (transformers' find_correction_range / linear_ramp_factor).
    double low = 0, high = 0;
    if (s.type == RopeScaling::Type::Yarn) {
        auto dim_for = [&](double rotations) {
            return rope_dim * std::log(s.original_ctx / (rotations * 2 * std::numbers::pi)) /
                   (2 * std::log(theta));
        };
        low = dim_for(s.beta_fast);
        high = dim_for(s.beta_slow);
        if (s.truncate) {
            low = std::floor(low);
            high = std::ceil(high);
        }
        low = std::max(low, 0.0);
        high = std::min(high, static_cast<double>(rope_dim - 1));
        if (low == high) high += 0.001;
    }
    for (size_t i = 0; i < f.size(); ++i) {
        double x = std::pow(theta, -2.0 * static_cast<double>(i) / rope_dim);
        if (s.type == RopeScaling::Type::Linear) {
            x /= s.factor;
        } else if (s.type == RopeScaling::Type::Yarn) {
            // 0 keeps the pair's own frequency (fast pairs), 1 interpolates it (slow ones).
            const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
            x = x / s.factor * ramp + x * (1 - ramp);
        } else if (s.type == RopeScaling::Type::Llama3) {
            // transformers' _compute_llama3_parameters, term for term.
            const double wavelen = 2 * std::numbers::pi / x;
            const double low_wavelen = s.original_ctx / s.low_freq_factor;
            const double high_wavelen = s.original_ctx / s.high_freq_factor;
            if (wavelen > low_wavelen) {
                x /= s.factor;
            } else if (wavelen >= high_wavelen) {
                const double smooth = (s.original_ctx / wavelen - s.low_freq_factor) /
                                      (s.high_freq_factor - s.low_freq_factor);
                x = (1 - smooth) * x / s.factor + smooth * x;
            }
        }
        if (!freq_factors.empty()) x /= static_cast<double>(freq_factors[i]);
        f[i] = x;
    }
    return f;
}

}  // namespace ferry::model
