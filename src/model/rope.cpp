#include "model/rope.h"

#include <cmath>
#include <numbers>

namespace ferry::model {

std::string rope_scaling_name(RopeScaling::Type t) {
    switch (t) {
        case RopeScaling::Type::Linear:
            return "linear";
        case RopeScaling::Type::Llama3:
            return "llama3";
        default:
            return "none";
    }
}

std::vector<double> rope_inv_freq(int rope_dim, double theta, const RopeScaling& s,
                                  std::span<const float> freq_factors) {
    std::vector<double> f(static_cast<size_t>(rope_dim / 2));
    for (size_t i = 0; i < f.size(); ++i) {
        double x = std::pow(theta, -2.0 * static_cast<double>(i) / rope_dim);
        if (s.type == RopeScaling::Type::Linear) {
            x /= s.factor;
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
