// Pruning a weight matrix: zeroing the weights that matter least, either N:M semi-structured
// (at most N non-zero in every M consecutive weights of a row along the input dimension; 2:4 is
// what sparse tensor cores and ferry's compressed 2:4 layout use) or unstructured (a fraction of
// each row). Every method decides per output row, as Wanda does: a row's output is what its
// weights feed, so a row never gives its share of zeros to another.
//
//   magnitude  the smallest |w| go;
//   wanda      the smallest |w_ij| * ||x_j|| go (Sun et al. 2023, "A Simple and Effective Pruning
//              Approach for Large Language Models"): a small weight on a loud input matters;
//   sparsegpt  the weights whose removal adds the least output error go, and the weights kept
//              are updated to make up for them (Frantar & Alistarh 2023, "SparseGPT"): GPTQ's
//              column sweep with "zero it or keep it" instead of "round it", on the same
//              inverse-Hessian factor (calibrate/gptq.h). The mask of each block of columns
//              (a group of M, or 128 columns unstructured) is chosen when the sweep reaches it,
//              on the weights as the earlier columns' updates left them.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "calibrate/gptq.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace ferry::calibrate {

struct SparsityPattern {
    int keep = 0, group = 0;  // N:M: keep at most `keep` of every `group` weights
    double fraction = 0;      // unstructured: this fraction of each row zeroed
    bool structured() const { return group > 0; }
    double sparsity() const {
        return structured() ? 1.0 - static_cast<double>(keep) / group : fraction;
    }
    std::string name() const;  // "2:4", "50 %"
    std::string spec() const;  // as --sparsity takes it (and the file records it): "2:4", "0.5"
    // Zeros a row of `cols` weights must have at least (unstructured: the fraction rounded).
    int64_t zeros_per_row(int64_t cols) const;
    // Whether every aligned 4 weights keep at most 2, which int4s (2:4 stored compressed)
    // needs: 2:4, 1:4, 1:2, and N:M with M a multiple of 4 and N <= 2.
    bool at_most_2_of_4() const {
        return structured() && ((group % 4 == 0 && keep <= 2) || (group == 2 && keep == 1));
    }
};

// "2:4", "4:8" (N < M, M <= 32) or a fraction "0.5" (0 < f < 1).
Expected<SparsityPattern> parse_sparsity(const std::string& s);

enum class PruneMethod { Magnitude, Wanda, SparseGpt };
const char* prune_method_name(PruneMethod m);
Expected<PruneMethod> parse_prune_method(const std::string& s);

// Whether a row length fits the pattern (N:M needs whole groups).
Status check_pattern(const SparsityPattern& p, int64_t cols);

// Magnitude (input_norm empty) or Wanda (input_norm[j] = ||x_j||, any positive scale): zeroes
// w (rows x cols, row-major) in place.
Status prune_by_score(std::span<float> w, int64_t rows, int64_t cols, const SparsityPattern& p,
                      std::span<const double> input_norm, ThreadPool& pool);

// SparseGPT: hess from prepare_gptq_hessian without act order. Zeroes and updates w in place.
Status sparsegpt_prune(std::span<float> w, int64_t rows, int64_t cols, const SparsityPattern& p,
                       const GptqHessian& hess, ThreadPool& pool);

// Every row follows the pattern (the check the tests and `ferry prune` make on what it wrote).
bool follows_pattern(std::span<const float> w, int64_t rows, int64_t cols,
                     const SparsityPattern& p);

}  // namespace ferry::calibrate
