// Pruning: every method leaves exactly the stated pattern; magnitude and Wanda drop the lowest
// scores and leave the kept weights as they were; SparseGPT's updates of the kept weights cut the
// layer's output error below Wanda's on the same inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "calibrate/gptq.h"
#include "calibrate/pruning.h"
#include "core/thread_pool.h"
#include "quant/dequantize.h"
#include "quant/quantize.h"

using namespace ferry;
using namespace ferry::calibrate;

namespace {

SparsityPattern pattern(const char* s) {
    auto p = parse_sparsity(s);
    EXPECT_TRUE(p.ok()) << s;
    return *p;
}

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> w(static_cast<size_t>(rows * cols));
    for (float& x : w) x = d(rng);
    return w;
}

// Inputs with correlated channels of different loudness, as a model's activations have.
std::vector<float> inputs(int64_t n, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n * cols));
    for (int64_t t = 0; t < n; ++t) {
        const float common = d(rng);
        for (int64_t j = 0; j < cols; ++j)
            x[t * cols + j] = (0.3f + static_cast<float>(j % 7)) * (d(rng) + 0.8f * common);
    }
    return x;
}

// Sum over the inputs of ||(W - W') x||^2.
double output_error(const std::vector<float>& w, const std::vector<float>& pruned,
                    const std::vector<float>& x, int64_t rows, int64_t cols) {
    const int64_t n = static_cast<int64_t>(x.size()) / cols;
    double e = 0;
    for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < rows; ++r) {
            double s = 0;
            for (int64_t j = 0; j < cols; ++j)
                s += (double(w[r * cols + j]) - pruned[r * cols + j]) * x[t * cols + j];
            e += s * s;
        }
    return e;
}

std::vector<double> hessian(const std::vector<float>& x, int64_t cols) {
    const int64_t n = static_cast<int64_t>(x.size()) / cols;
    std::vector<double> h(static_cast<size_t>(cols * cols), 0.0);
    for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < cols; ++i)
            for (int64_t j = 0; j < cols; ++j)
                h[i * cols + j] += 2.0 / n * x[t * cols + i] * x[t * cols + j];
    return h;
}

}  // namespace

TEST(Pruning, PatternsParseAndBadOnesAreRefused) {
    EXPECT_EQ(pattern("2:4").keep, 2);
    EXPECT_EQ(pattern("2:4").group, 4);
    EXPECT_DOUBLE_EQ(pattern("2:4").sparsity(), 0.5);
    EXPECT_DOUBLE_EQ(pattern("0.7").fraction, 0.7);
    EXPECT_EQ(pattern("4:8").zeros_per_row(64), 32);
    EXPECT_EQ(pattern("0.3").zeros_per_row(10), 3);
    // What a file records parses back to the same pattern.
    for (const char* spec : {"2:4", "4:8", "0.3", "0.125"}) {
        EXPECT_EQ(pattern(spec).spec(), spec);
        const SparsityPattern p = pattern(pattern(spec).spec().c_str());
        EXPECT_EQ(p.keep, pattern(spec).keep);
        EXPECT_EQ(p.fraction, pattern(spec).fraction);
    }
    for (const char* bad :
         {"4:2", "2:2", "0:4", "2:64", "2:4x", "x:4", "1.5", "0", "-0.5", "abc", ""})
        EXPECT_FALSE(parse_sparsity(bad).ok()) << bad;
    EXPECT_FALSE(parse_prune_method("random").ok());
    // What int4s can store: at most 2 non-zero in every aligned 4.
    for (const char* fits : {"2:4", "1:4", "1:2", "2:8", "1:16"})
        EXPECT_TRUE(pattern(fits).at_most_2_of_4()) << fits;
    for (const char* not_fits : {"3:4", "4:8", "3:8", "2:3", "0.5", "0.9"})
        EXPECT_FALSE(pattern(not_fits).at_most_2_of_4()) << not_fits;
}

TEST(Pruning, MagnitudeKeepsTheLargestOfEachGroupUntouched) {
    ThreadPool pool(2);
    const int64_t rows = 9, cols = 64;
    const auto w = random_matrix(rows, cols, 1);
    for (const char* pat : {"2:4", "1:4", "4:8"}) {
        const SparsityPattern p = pattern(pat);
        auto pruned = w;
        ASSERT_TRUE(prune_by_score(pruned, rows, cols, p, {}, pool).ok());
        EXPECT_TRUE(follows_pattern(pruned, rows, cols, p)) << pat;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t g = 0; g < cols; g += p.group) {
                const float* a = &w[r * cols + g];
                const float* b = &pruned[r * cols + g];
                float smallest_kept = INFINITY, largest_dropped = 0;
                int kept = 0;
                for (int j = 0; j < p.group; ++j) {
                    if (b[j] != 0) {
                        EXPECT_EQ(b[j], a[j]) << "a kept weight changed";
                        smallest_kept = std::min(smallest_kept, std::fabs(a[j]));
                        ++kept;
                    } else {
                        largest_dropped = std::max(largest_dropped, std::fabs(a[j]));
                    }
                }
                EXPECT_EQ(kept, p.keep);
                EXPECT_GE(smallest_kept, largest_dropped);
            }
    }
}

TEST(Pruning, UnstructuredZeroesTheStatedFractionOfEachRow) {
    ThreadPool pool(2);
    const int64_t rows = 5, cols = 100;
    const auto w = random_matrix(rows, cols, 2);
    auto pruned = w;
    ASSERT_TRUE(prune_by_score(pruned, rows, cols, pattern("0.35"), {}, pool).ok());
    for (int64_t r = 0; r < rows; ++r)
        EXPECT_EQ(std::count(&pruned[r * cols], &pruned[(r + 1) * cols], 0.0f), 35);
    EXPECT_TRUE(follows_pattern(pruned, rows, cols, pattern("0.35")));
    EXPECT_FALSE(follows_pattern(pruned, rows, cols, pattern("0.4")));
}

TEST(Pruning, WandaWeighsAWeightByItsInputsLoudness) {
    ThreadPool pool(2);
    // One group of four: magnitude keeps the two largest; a loud input on the smallest weight
    // makes Wanda keep that one instead.
    std::vector<float> w = {0.1f, 1.0f, 0.9f, 0.5f};
    auto mag = w, wanda = w;
    ASSERT_TRUE(prune_by_score(mag, 1, 4, pattern("2:4"), {}, pool).ok());
    EXPECT_EQ(mag, (std::vector<float>{0, 1.0f, 0.9f, 0}));
    const std::vector<double> norms = {20.0, 1.0, 1.0, 1.0};
    ASSERT_TRUE(prune_by_score(wanda, 1, 4, pattern("2:4"), norms, pool).ok());
    EXPECT_EQ(wanda, (std::vector<float>{0.1f, 1.0f, 0, 0}));
}

TEST(Pruning, SparseGptFollowsThePatternWithLessOutputErrorThanWanda) {
    ThreadPool pool(2);
    const int64_t rows = 24, cols = 256, n = 512;
    const auto w = random_matrix(rows, cols, 3);
    const auto x = inputs(n, cols, 4);
    const auto h = hessian(x, cols);
    std::vector<double> norms(static_cast<size_t>(cols));
    for (int64_t j = 0; j < cols; ++j) norms[j] = std::sqrt(h[j * cols + j]);
    auto hess = prepare_gptq_hessian(h, cols, GptqOptions{}, pool);
    ASSERT_TRUE(hess.ok()) << hess.error().message;
    for (const char* pat : {"2:4", "0.5"}) {
        const SparsityPattern p = pattern(pat);
        auto mag = w, wanda = w, sgpt = w;
        ASSERT_TRUE(prune_by_score(mag, rows, cols, p, {}, pool).ok());
        ASSERT_TRUE(prune_by_score(wanda, rows, cols, p, norms, pool).ok());
        ASSERT_TRUE(sparsegpt_prune(sgpt, rows, cols, p, *hess, pool).ok());
        EXPECT_TRUE(follows_pattern(sgpt, rows, cols, p)) << pat;
        const double em = output_error(w, mag, x, rows, cols);
        const double ew = output_error(w, wanda, x, rows, cols);
        const double es = output_error(w, sgpt, x, rows, cols);
        EXPECT_LT(ew, em) << pat << ": Wanda should beat magnitude on loud-channel inputs";
        EXPECT_LT(es, 0.8 * ew) << pat << ": SparseGPT's updates should cut the error further";
    }
}

TEST(Pruning, RowsThatDoNotSplitIntoGroupsAreRefused) {
    ThreadPool pool(1);
    std::vector<float> w(30, 1.0f);
    const Status s = prune_by_score(w, 1, 30, pattern("2:4"), {}, pool);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("groups of 4"), std::string::npos) << s.error().message;
    EXPECT_FALSE(follows_pattern(std::vector<float>(8, 1.0f), 1, 8, pattern("2:4")));
}

// quant::keeps_zeros is what quantize trusts before writing a pruned file in a type: it must say
// exactly which of the types ferry writes give a 2:4 row's zeros back as zeros.
TEST(Pruning, KeepsZerosIsExactlyTheTypesThatRoundZeroToZero) {
    ThreadPool pool(1);
    const int64_t cols = 512;
    auto w = random_matrix(4, cols, 11);
    ASSERT_TRUE(prune_by_score(w, 4, cols, pattern("2:4"), {}, pool).ok());
    for (uint32_t id = 0; id < 2048; ++id) {
        const auto info = dtype_info(id);
        if (!info || !quant::can_quantize(info->type) || cols % info->block_size != 0) continue;
        bool kept = true;
        std::vector<float> back(static_cast<size_t>(cols));
        for (int64_t r = 0; r < 4; ++r) {
            auto q = quant::quantize(info->type, w.data() + r * cols, cols);
            ASSERT_TRUE(q.ok());
            ASSERT_TRUE(quant::dequantize_row(info->type, q->data(), back.data(), cols).ok());
            for (int64_t j = 0; j < cols; ++j)
                if (w[r * cols + j] == 0.0f && back[j] != 0.0f) kept = false;
        }
        EXPECT_EQ(kept, quant::keeps_zeros(info->type)) << info->name;
    }
}
