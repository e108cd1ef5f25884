#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ferry::kernels {

void attend_paged(const float* q, const PagedKvView& kv, int64_t n_kv, int head_dim, float scale,
                  float* out) {
    float m = -std::numeric_limits<float>::infinity(), l = 0;
    std::fill(out, out + head_dim, 0.0f);
    for (int64_t start = 0, b = 0; start < n_kv; start += kv.block_size, ++b) {
        const int64_t len = std::min<int64_t>(kv.block_size, n_kv - start);
        const float* kb = kv.k_blocks[b] + kv.head_offset;
        const float* vb = kv.v_blocks[b] + kv.head_offset;
        for (int64_t p = 0; p < len; ++p) {
            const float* kp = kb + p * kv.stride;
            float s = 0;
            for (int d = 0; d < head_dim; ++d) s += q[d] * kp[d];
            s *= scale;
            if (s > m) {  // rescale what has been accumulated to the new maximum
                const float c = std::exp(m - s);
                l *= c;
                for (int d = 0; d < head_dim; ++d) out[d] *= c;
                m = s;
            }
            const float w = std::exp(s - m);
            l += w;
            const float* vp = vb + p * kv.stride;
            for (int d = 0; d < head_dim; ++d) out[d] += w * vp[d];
        }
    }
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    for (int d = 0; d < head_dim; ++d) out[d] *= inv;
}

}  // namespace ferry::kernels
