// GPTQ on the CPU in double. The reference implementation defers updates to blocks of 128
// columns because a GPU is bound by memory traffic on W; here rows are processed in small
// tiles that stay in cache, so each column's error goes to the remaining columns at once,
// which also keeps a group's weights current whenever its grid is fitted (act-order visits a
// group's columns out of order).
#include "calibrate/gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "quant/group_grid.h"

namespace ferry::calibrate {
namespace {

// Four partial sums: a strict left-to-right sum would not vectorize.
double dot(const double* a, const double* b, int64_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; ++i) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

// In place: the lower triangle of a (n x n, row-major) becomes L with L L^T = a. Column by
// column, the entries below the diagonal being independent dot products spread over the
// pool. False when a pivot is not positive.
bool cholesky_lower(std::vector<double>& a, int64_t n, ThreadPool& pool) {
    for (int64_t j = 0; j < n; ++j) {
        double* rj = &a[j * n];
        const double s = rj[j] - dot(rj, rj, j);
        if (!(s > 0) || !std::isfinite(s)) return false;
        rj[j] = std::sqrt(s);
        const double inv = 1.0 / rj[j];
        pool.parallel_for(
            n - j - 1,
            [&](int64_t i0, int64_t i1) {
                for (int64_t i = j + 1 + i0; i < j + 1 + i1; ++i) {
                    double* ri = &a[i * n];
                    ri[j] = (ri[j] - dot(ri, rj, j)) * inv;
                }
            },
            16);
    }
    return true;
}

// The inverse of lower-triangular L (lower triangle of l), column by column (forward
// substitution of unit vectors; columns are independent).
std::vector<double> invert_lower(const std::vector<double>& l, int64_t n, ThreadPool& pool) {
    std::vector<double> inv(static_cast<size_t>(n * n), 0.0);
    pool.run_tasks(n, [&](int64_t c) {
        std::vector<double> x(static_cast<size_t>(n - c));  // x[i - c] = inv[i][c]
        x[0] = 1.0 / l[c * n + c];
        for (int64_t i = c + 1; i < n; ++i)
            x[i - c] = -dot(&l[i * n + c], x.data(), i - c) / l[i * n + i];
        for (int64_t i = c; i < n; ++i) inv[i * n + c] = x[i - c];
    });
    return inv;
}

constexpr int kTileRows = 16;

}  // namespace

Expected<GptqHessian> prepare_gptq_hessian(std::span<const double> h, int64_t n,
                                           const GptqOptions& opt, ThreadPool& pool) {
    if (static_cast<int64_t>(h.size()) != n * n)
        return make_error("gptq: Hessian has {} entries, {} x {} expected", h.size(), n, n);
    GptqHessian r;
    r.n = n;
    r.dead.assign(static_cast<size_t>(n), 0);
    std::vector<double> diag(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        diag[i] = h[i * n + i];
        if (diag[i] == 0) {
            // No input ever reached this column: its weights cannot matter on the calibration
            // data, so they are zeroed and the unit diagonal keeps H invertible.
            r.dead[i] = 1;
            diag[i] = 1;
        }
    }
    r.perm.resize(static_cast<size_t>(n));
    std::iota(r.perm.begin(), r.perm.end(), 0);
    if (opt.act_order)
        std::stable_sort(r.perm.begin(), r.perm.end(),
                         [&](int32_t a, int32_t b) { return diag[a] > diag[b]; });
    const double mean_diag =
        std::accumulate(diag.begin(), diag.end(), 0.0) / static_cast<double>(n);

    // U with H^-1 = U^T U comes from one Cholesky and one triangular inverse: with J the
    // reversal permutation and J H J = L L^T, H^-1 = (J L^-1 J)^T (J L^-1 J), and J L^-1 J is
    // upper triangular. (Inverting H and factorizing again would cost twice as much.)
    std::vector<double> a(static_cast<size_t>(n * n));
    double damp = opt.damp;
    for (int tries = 0; tries < 4; ++tries, damp *= 10) {
        for (int64_t i = 0; i < n; ++i) {
            const int64_t pi = r.perm[n - 1 - i];
            for (int64_t j = 0; j < n; ++j) {
                const int64_t pj = r.perm[n - 1 - j];
                a[i * n + j] =
                    pi == pj ? diag[pi] : (r.dead[pi] || r.dead[pj] ? 0.0 : h[pi * n + pj]);
            }
            a[i * n + i] += damp * mean_diag;
        }
        if (!cholesky_lower(a, n, pool)) continue;
        const std::vector<double> inv = invert_lower(a, n, pool);
        r.u.assign(static_cast<size_t>(n * n), 0.0);
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = i; j < n; ++j) r.u[i * n + j] = inv[(n - 1 - i) * n + (n - 1 - j)];
        r.damp = damp;
        return r;
    }
    return make_error("gptq: the Hessian is not positive definite even with damping {}",
                      opt.damp * 1000);
}

Expected<std::vector<uint8_t>> gptq_quantize(DType type, const float* w, int64_t rows, int64_t cols,
                                             const GptqHessian& hess, ThreadPool& pool,
                                             bool keep_zeros) {
    if (!quant::has_group_grid(type))
        return make_error("gptq: type {} has no group grid", dtype_name(type));
    const int G = quant::grid_group_size(type);
    if (cols != hess.n || cols % G != 0)
        return make_error("gptq: a matrix of {} columns with a Hessian of {} and groups of {}",
                          cols, hess.n, G);
    const int64_t n = cols, n_groups = cols / G;
    const size_t out_row = row_bytes(type, cols), block = row_bytes(type, G);
    std::vector<int32_t> pos(static_cast<size_t>(n));  // column -> processing step
    for (int64_t p = 0; p < n; ++p) pos[hess.perm[p]] = static_cast<int32_t>(p);
    std::vector<uint8_t> out(out_row * static_cast<size_t>(rows));
    if (keep_zeros) {
        // A group's grid has an exact 0 when its zero code maps back to 0 for any scale.
        std::vector<float> probe(static_cast<size_t>(G));
        for (int j = 0; j < G; ++j) probe[j] = 0.25f + 0.5f * static_cast<float>(j) / G;
        const quant::GroupParams gp = quant::fit_group(type, probe.data());
        if (quant::grid_value(type, gp, quant::round_to_grid(type, gp, 0.0f)) != 0.0f)
            return make_error(
                "gptq: a pruned matrix needs a type whose grid holds 0 exactly (int4, q4_0), "
                "not {}",
                dtype_name(type));
    }

    pool.run_tasks((rows + kTileRows - 1) / kTileRows, [&](int64_t tile) {
        const int64_t r0 = tile * kTileRows, nr = std::min<int64_t>(kTileRows, rows - r0);
        // The tile's weights in processing order, updated in place by the error feedback.
        std::vector<double> wt(static_cast<size_t>(nr * n));
        for (int64_t r = 0; r < nr; ++r)
            for (int64_t p = 0; p < n; ++p) {
                const int32_t c = hess.perm[p];
                wt[r * n + p] = hess.dead[c] ? 0.0 : w[(r0 + r) * cols + c];
            }
        // A pruned weight (0 in w) stays 0; its error is fed forward like any rounding error.
        auto pruned = [&](int64_t r, int64_t c) {
            return keep_zeros && w[(r0 + r) * cols + c] == 0;
        };
        std::vector<uint8_t> codes(static_cast<size_t>(nr * n));  // column order
        std::vector<quant::GroupParams> params(static_cast<size_t>(nr * n_groups));
        std::vector<uint8_t> fitted(static_cast<size_t>(n_groups), 0);
        std::vector<float> group(static_cast<size_t>(G));
        for (int64_t p = 0; p < n; ++p) {
            const int32_t c = hess.perm[p];
            const int64_t g = c / G;
            if (!fitted[g]) {
                // The grid is fixed now, from the group's weights as the errors of the columns
                // already quantized have left them.
                for (int64_t r = 0; r < nr; ++r) {
                    for (int j = 0; j < G; ++j)
                        group[j] = pruned(r, g * G + j)
                                       ? 0.0f
                                       : static_cast<float>(wt[r * n + pos[g * G + j]]);
                    params[r * n_groups + g] = quant::fit_group(type, group.data());
                }
                fitted[g] = 1;
            }
            const double* urow = &hess.u[p * n];
            const double d = urow[p];
            for (int64_t r = 0; r < nr; ++r) {
                double* wr = &wt[r * n];
                const quant::GroupParams& gp = params[r * n_groups + g];
                const uint8_t code =
                    quant::round_to_grid(type, gp, pruned(r, c) ? 0.0f : static_cast<float>(wr[p]));
                codes[r * n + c] = code;
                const double err = (wr[p] - quant::grid_value(type, gp, code)) / d;
                if (err == 0 || !std::isfinite(err)) continue;
                for (int64_t j = p + 1; j < n; ++j) wr[j] -= err * urow[j];
            }
        }
        for (int64_t r = 0; r < nr; ++r)
            for (int64_t g = 0; g < n_groups; ++g)
                quant::pack_group(type, params[r * n_groups + g], &codes[r * n + g * G],
                                  out.data() + (r0 + r) * out_row + g * block);
    });
    return out;
}

}  // namespace ferry::calibrate
