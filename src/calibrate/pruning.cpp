#include "calibrate/pruning.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace ferry::calibrate {
namespace {

constexpr int kTileRows = 16;
constexpr int64_t kSparseGptBlock = 128;  // unstructured: columns whose mask is chosen together

// Marks the `z` lowest scores among idx (ties: the lower column first, so results do not
// depend on the sort's whims).
void lowest(std::vector<int64_t>& idx, const double* score, int64_t z, uint8_t* mask) {
    if (z <= 0) return;
    auto less = [&](int64_t a, int64_t b) {
        return score[a] != score[b] ? score[a] < score[b] : a < b;
    };
    if (z < static_cast<int64_t>(idx.size()))
        std::nth_element(idx.begin(), idx.begin() + z, idx.end(), less);
    for (int64_t i = 0; i < z && i < static_cast<int64_t>(idx.size()); ++i) mask[idx[i]] = 1;
}

// One row's mask over columns [c0, c1): `z` of them, by score.
void mask_range(const double* score, int64_t c0, int64_t c1, int64_t z, uint8_t* mask,
                std::vector<int64_t>& idx) {
    idx.resize(static_cast<size_t>(c1 - c0));
    std::iota(idx.begin(), idx.end(), c0);
    lowest(idx, score, z, mask);
}

}  // namespace

std::string SparsityPattern::name() const {
    if (structured()) return fmt::format("{}:{}", keep, group);
    return fmt::format("{:g} %", fraction * 100);
}

std::string SparsityPattern::spec() const {
    return structured() ? name() : fmt::format("{:g}", fraction);
}

int64_t SparsityPattern::zeros_per_row(int64_t cols) const {
    if (structured()) return cols / group * (group - keep);
    return std::llround(fraction * static_cast<double>(cols));
}

Expected<SparsityPattern> parse_sparsity(const std::string& s) {
    SparsityPattern p;
    if (const auto colon = s.find(':'); colon != std::string::npos) {
        try {
            size_t a = 0, b = 0;
            p.keep = std::stoi(s.substr(0, colon), &a);
            p.group = std::stoi(s.substr(colon + 1), &b);
            if (a != colon || b != s.size() - colon - 1) throw std::invalid_argument("");
        } catch (const std::exception&) {
            return make_error("--sparsity '{}': expected N:M (2:4) or a fraction (0.5)", s);
        }
        if (p.keep < 1 || p.group > 32 || p.keep >= p.group)
            return make_error("--sparsity {}: N:M needs 1 <= N < M <= 32", s);
        return p;
    }
    try {
        size_t used = 0;
        p.fraction = std::stod(s, &used);
        if (used != s.size()) throw std::invalid_argument("");
    } catch (const std::exception&) {
        return make_error("--sparsity '{}': expected N:M (2:4) or a fraction (0.5)", s);
    }
    if (!(p.fraction > 0 && p.fraction < 1))
        return make_error("--sparsity {}: a fraction must be between 0 and 1", s);
    return p;
}

const char* prune_method_name(PruneMethod m) {
    switch (m) {
        case PruneMethod::Wanda:
            return "wanda";
        case PruneMethod::SparseGpt:
            return "sparsegpt";
        default:
            return "magnitude";
    }
}

Expected<PruneMethod> parse_prune_method(const std::string& s) {
    if (s == "magnitude") return PruneMethod::Magnitude;
    if (s == "wanda") return PruneMethod::Wanda;
    if (s == "sparsegpt") return PruneMethod::SparseGpt;
    return make_error("unknown pruning method '{}' (expected magnitude, wanda or sparsegpt)", s);
}

Status check_pattern(const SparsityPattern& p, int64_t cols) {
    if (p.structured() && cols % p.group != 0)
        return make_error("rows of {} weights do not split into groups of {} for {}", cols, p.group,
                          p.name());
    return Status::Ok();
}

Status prune_by_score(std::span<float> w, int64_t rows, int64_t cols, const SparsityPattern& p,
                      std::span<const double> input_norm, ThreadPool& pool) {
    if (Status s = check_pattern(p, cols); !s) return s;
    if (static_cast<int64_t>(w.size()) != rows * cols)
        return make_error("prune: {} weights for a {} x {} matrix", w.size(), rows, cols);
    if (!input_norm.empty() && static_cast<int64_t>(input_norm.size()) != cols)
        return make_error("prune: {} input norms for {} columns", input_norm.size(), cols);
    pool.parallel_for(
        rows,
        [&](int64_t r0, int64_t r1) {
            std::vector<double> score(static_cast<size_t>(cols));
            std::vector<uint8_t> mask(static_cast<size_t>(cols));
            std::vector<int64_t> idx;
            for (int64_t r = r0; r < r1; ++r) {
                float* row = w.data() + r * cols;
                for (int64_t j = 0; j < cols; ++j)
                    score[j] = std::fabs(static_cast<double>(row[j])) *
                               (input_norm.empty() ? 1.0 : input_norm[j]);
                std::fill(mask.begin(), mask.end(), uint8_t{0});
                if (p.structured()) {
                    for (int64_t c0 = 0; c0 < cols; c0 += p.group)
                        mask_range(score.data(), c0, c0 + p.group, p.group - p.keep, mask.data(),
                                   idx);
                } else {
                    mask_range(score.data(), 0, cols, p.zeros_per_row(cols), mask.data(), idx);
                }
                for (int64_t j = 0; j < cols; ++j)
                    if (mask[j]) row[j] = 0.0f;
            }
        },
        4);
    return Status::Ok();
}

Status sparsegpt_prune(std::span<float> w, int64_t rows, int64_t cols, const SparsityPattern& p,
                       const GptqHessian& hess, ThreadPool& pool) {
    if (Status s = check_pattern(p, cols); !s) return s;
    if (cols != hess.n || static_cast<int64_t>(w.size()) != rows * cols)
        return make_error("sparsegpt: a {} x {} matrix with a Hessian of {}", rows, cols, hess.n);
    for (int64_t i = 0; i < cols; ++i)
        if (hess.perm[i] != i) return make_error("sparsegpt: the Hessian must be in column order");
    const int64_t n = cols;
    const int64_t block = p.structured() ? p.group : kSparseGptBlock;
    pool.run_tasks((rows + kTileRows - 1) / kTileRows, [&](int64_t tile) {
        const int64_t r0 = tile * kTileRows, nr = std::min<int64_t>(kTileRows, rows - r0);
        std::vector<double> wt(static_cast<size_t>(nr * n));
        for (int64_t r = 0; r < nr; ++r)
            for (int64_t j = 0; j < n; ++j)
                wt[r * n + j] = hess.dead[j] ? 0.0 : w[(r0 + r) * cols + j];
        std::vector<uint8_t> mask(static_cast<size_t>(nr * n), 0);
        std::vector<double> score(static_cast<size_t>(n));
        std::vector<int64_t> idx;
        for (int64_t c = 0; c < n; ++c) {
            if (c % block == 0) {
                // The block's mask, from the weights as the columns before it left them: the
                // error a weight's removal adds is w^2 / [H^-1]_jj = (w / U_jj)^2.
                const int64_t c1 = std::min(n, c + block);
                const int64_t z =
                    p.structured() ? p.group - p.keep : p.zeros_per_row(c1) - p.zeros_per_row(c);
                for (int64_t r = 0; r < nr; ++r) {
                    for (int64_t j = c; j < c1; ++j) {
                        const double q = wt[r * n + j] / hess.u[j * n + j];
                        score[j] = q * q;
                    }
                    mask_range(score.data(), c, c1, z, &mask[r * n], idx);
                }
            }
            const double* urow = &hess.u[c * n];
            const double d = urow[c];
            for (int64_t r = 0; r < nr; ++r) {
                if (!mask[r * n + c]) continue;
                double* wr = &wt[r * n];
                const double err = wr[c] / d;
                wr[c] = 0;
                if (err == 0 || !std::isfinite(err)) continue;
                for (int64_t j = c + 1; j < n; ++j) wr[j] -= err * urow[j];
            }
        }
        for (int64_t r = 0; r < nr; ++r)
            for (int64_t j = 0; j < n; ++j)
                w[(r0 + r) * cols + j] = mask[r * n + j] ? 0.0f : static_cast<float>(wt[r * n + j]);
    });
    return Status::Ok();
}

bool follows_pattern(std::span<const float> w, int64_t rows, int64_t cols,
                     const SparsityPattern& p) {
    if (!check_pattern(p, cols) || static_cast<int64_t>(w.size()) != rows * cols) return false;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = w.data() + r * cols;
        if (p.structured()) {
            for (int64_t c0 = 0; c0 < cols; c0 += p.group) {
                const auto nz =
                    std::count_if(row + c0, row + c0 + p.group, [](float x) { return x != 0.0f; });
                if (nz > p.keep) return false;
            }
        } else {
            const auto zeros = std::count(row, row + cols, 0.0f);
            if (zeros < p.zeros_per_row(cols)) return false;
        }
    }
    return true;
}

}  // namespace ferry::calibrate
