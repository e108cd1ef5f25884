// GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for Generative
// Pre-trained Transformers"): quantizes a weight matrix one input column at a time and
// spreads each column's rounding error over the columns not yet quantized, weighted by the
// inverse Hessian H^-1 of the layer's squared output error, H = 2 X^T X over calibration
// inputs X. Rounding is onto the target format's own grid (group_grid.h), so the written
// file dequantizes to exactly the weights GPTQ chose.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace ferry::calibrate {

struct GptqOptions {
    double damp = 0.01;       // added to H's diagonal, as a fraction of its mean
    bool act_order = false;   // columns in order of descending H_ii (most active first)
    bool keep_zeros = false;  // a pruned model: its zeros stay exact 0 (gptq_quantize)
};

// What the matrices sharing one input need from its Hessian, computed once for all of them.
struct GptqHessian {
    int64_t n = 0;
    std::vector<int32_t> perm;  // processing step -> column
    std::vector<uint8_t> dead;  // 1: the column never saw a non-zero input; its weights are 0
    std::vector<double> u;      // n x n: upper Cholesky factor of H^-1, in processing order
    double damp = 0;            // the damping fraction that made H positive definite
};

// h: n x n, symmetric. When H + damp is not numerically positive definite, the damping is
// raised tenfold (up to three times) before giving up.
Expected<GptqHessian> prepare_gptq_hessian(std::span<const double> h, int64_t n,
                                           const GptqOptions& opt, ThreadPool& pool);

// w: rows x cols floats (cols == hess.n), type with has_group_grid(type). Returns the
// matrix as rows x row_bytes(type, cols) bytes. keep_zeros (a pruned matrix): every weight that
// is 0 in w is written as an exact 0 whatever the error feedback brought it to, so the sparsity
// pattern survives (SparseGPT's joint sparsification and quantization, with the mask fixed);
// refused for a type whose grid has no exact 0 (q4_1).
Expected<std::vector<uint8_t>> gptq_quantize(DType type, const float* w, int64_t rows, int64_t cols,
                                             const GptqHessian& hess, ThreadPool& pool,
                                             bool keep_zeros = false);

}  // namespace ferry::calibrate
