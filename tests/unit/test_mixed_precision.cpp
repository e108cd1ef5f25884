// Per-layer mixed precision: the budget allocation (calibrate/mixed_precision.h) against an
// exhaustive search, and the sensitivity measurement (calibrate/sensitivity.h) against the
// evaluator's KL on the real default model.
#include "calibrate/mixed_precision.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "calibrate/sensitivity.h"
#include "engine/loaded_model.h"
#include "eval/evaluator.h"
#include "quant/dequantize.h"
#include "quant/quantize.h"
#include "test_util.h"

namespace ferry::calibrate {
namespace {

double total_kl(std::span<const MixItem> items, const std::vector<size_t>& pick) {
    double s = 0;
    for (size_t i = 0; i < items.size(); ++i) s += items[i].options[pick[i]].kl;
    return s;
}
size_t total_bytes(std::span<const MixItem> items, const std::vector<size_t>& pick) {
    size_t s = 0;
    for (size_t i = 0; i < items.size(); ++i) s += items[i].options[pick[i]].bytes;
    return s;
}

// Every combination: the least total KL within the budget.
double best_exhaustive(std::span<const MixItem> items, size_t budget) {
    std::vector<size_t> pick(items.size(), 0);
    double best = std::numeric_limits<double>::infinity();
    while (true) {
        if (total_bytes(items, pick) <= budget) best = std::min(best, total_kl(items, pick));
        size_t i = 0;
        while (i < items.size() && ++pick[i] == items[i].options.size()) pick[i++] = 0;
        if (i == items.size()) return best;
    }
}

TEST(MixedPrecision, ExtremeBudgetsTakeTheCheapestOrTheBest) {
    const std::vector<MixItem> items = {
        {"a", {{DType::INT3_G64, 300, 0.5}, {DType::INT4_G64, 400, 0.2}, {DType::Q8_0, 800, 0.0}}},
        {"b", {{DType::INT3_G64, 30, 0.05}, {DType::INT4_G64, 40, 0.01}, {DType::Q8_0, 80, 0.0}}},
    };
    auto all = allocate_precision(items, 880);
    ASSERT_TRUE(all.ok());
    EXPECT_EQ(*all, (std::vector<size_t>{2, 2}));
    auto least = allocate_precision(items, 330);
    ASSERT_TRUE(least.ok());
    EXPECT_EQ(*least, (std::vector<size_t>{0, 0}));
    auto none = allocate_precision(items, 329);
    ASSERT_FALSE(none.ok());
    EXPECT_NE(none.error().message.find("330"), std::string::npos) << none.error().message;
    // 100 spare bytes: a's int4 saves 0.3 for 100; b's upgrades save 0.05 for 50 at a better
    // rate per byte, but taking them leaves no room for a's (where a greedy pass goes wrong).
    auto some = allocate_precision(items, 430);
    ASSERT_TRUE(some.ok());
    EXPECT_EQ(*some, (std::vector<size_t>{1, 0}));
}

// A large problem is solved in units of its spare budget: still within the budget, and no worse
// than the best single option index for all (what a uniform type is).
TEST(MixedPrecision, LargeBudgetsFitAndBeatUniform) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<MixItem> items(200);
    for (auto& it : items) {
        const size_t n = 1000000 + rng() % 3000000;
        it.options = {{DType::INT3_G64, n * 7 / 16, u(rng)},
                      {DType::INT4_G64, n * 9 / 16, 0.3 * u(rng)},
                      {DType::Q8_0, n * 17 / 16, 0.01 * u(rng)}};
    }
    for (size_t k = 0; k < 3; ++k) {
        std::vector<size_t> uniform(items.size(), k);
        const size_t budget = total_bytes(items, uniform) + 12345;
        auto r = allocate_precision(items, budget);
        ASSERT_TRUE(r.ok());
        EXPECT_LE(total_bytes(items, *r), budget);
        EXPECT_LE(total_kl(items, *r), total_kl(items, uniform) + 1e-12);
        if (k == 1) {
            EXPECT_LT(total_kl(items, *r), 0.9 * total_kl(items, uniform));
        }
    }
}

TEST(MixedPrecision, DominatedOptionsAreNeverChosen) {
    // More bytes for more KL (a bad type for this matrix), and a tie in bytes: never worth it.
    const std::vector<MixItem> items = {
        {"a",
         {{DType::INT3_G64, 100, 0.4},
          {DType::INT4_G64, 200, 0.6},
          {DType::Q4_0, 200, 0.1},
          {DType::Q8_0, 400, 0.1}}},
    };
    for (size_t budget : {100, 150, 200, 399, 1000}) {
        auto r = allocate_precision(items, budget);
        ASSERT_TRUE(r.ok());
        EXPECT_NE((*r)[0], 1u) << budget;
        EXPECT_NE((*r)[0], 3u) << budget;
        EXPECT_EQ((*r)[0], budget >= 200 ? 2u : 0u) << budget;
    }
}

// Small problems (one byte a unit): the exact optimum, convex costs or not.
TEST(MixedPrecision, MatchesExhaustiveSearchOnRandomProblems) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(0, 1);
    for (int trial = 0; trial < 200; ++trial) {
        const bool convex = trial % 2 == 0;
        std::vector<MixItem> items(4);
        for (auto& it : items) {
            const int n = 2 + static_cast<int>(rng() % 3);
            double kl = 1 + 3 * u(rng), step = 0.5 + u(rng);
            size_t bytes = 100;
            for (int k = 0; k < n; ++k) {
                it.options.push_back({DType::F32, bytes, kl});
                if (convex) {
                    kl = std::max(0.0, kl - step);
                    step *= 0.3 + 0.6 * u(rng);
                    bytes += 100;
                } else {
                    kl *= u(rng);
                    bytes += 50 + rng() % 300;
                }
            }
        }
        size_t least = 0, most = 0;
        for (const auto& it : items)
            least += it.options.front().bytes, most += it.options.back().bytes;
        const size_t budget = convex ? least + 100 * (rng() % ((most - least) / 100 + 1))
                                     : least + rng() % (most - least + 1);
        auto r = allocate_precision(items, budget);
        ASSERT_TRUE(r.ok()) << r.error().message;
        ASSERT_LE(total_bytes(items, *r), budget);
        const double got = total_kl(items, *r), best = best_exhaustive(items, budget);
        EXPECT_NEAR(got, best, 1e-12) << "trial " << trial;
    }
}

// ---- sensitivity on the default model ------------------------------------------------------

std::vector<int32_t> text_tokens(const engine::LoadedModel& lm, size_t n) {
    std::ifstream in(ferry::testing::source_dir() + "/data/eval/lighthouse.txt");
    std::stringstream ss;
    ss << in.rdbuf();
    auto t = lm.tokenizer->encode(ss.str(), true);
    t.resize(std::min(n, t.size()));
    return t;
}

// The matrix as the file holds it, rounded to `type` (an owning tensor).
Tensor rounded(const model::WeightFile& file, const std::string& name, DType type) {
    const Tensor src = *file.find(name).value();
    const int64_t rows = src.rows(), cols = src.cols();
    auto bytes = std::make_shared<std::vector<uint8_t>>(row_bytes(type, cols) * rows);
    std::vector<float> x(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        EXPECT_TRUE(quant::dequantize_row(
                        src.dtype(), static_cast<const uint8_t*>(src.raw()) + r * src.row_bytes(),
                        x.data(), cols)
                        .ok());
        EXPECT_TRUE(
            quant::quantize_row(type, x.data(), bytes->data() + r * row_bytes(type, cols), cols)
                .ok());
    }
    return Tensor(bytes->data(), type, {rows, cols}).owned_by(bytes);
}

TEST(Sensitivity, IsTheEvaluatorsKlAndLeavesTheModelAsLoaded) {
    const std::string path = ferry::testing::default_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no default model";
    auto backend = ferry::testing::cpu_backend(2);
    auto a = engine::LoadedModel::load(path, false, backend);
    auto b = engine::LoadedModel::load(path, false, backend);
    ASSERT_TRUE(a.ok() && b.ok());
    const std::vector<int32_t> tokens = text_tokens(*a, 65);
    const std::span<const int32_t> scored(tokens.data(), 64);

    const std::string m = "blk.3.ffn_down.weight";
    const std::vector<SensitivityTrial> trials = {{m, DType::Q4_1},
                                                  {m, DType::INT3_G128},
                                                  {m, DType::INT4_G128},
                                                  {m, DType::Q8_0},
                                                  {"token_embd.weight", DType::INT4_G64}};
    auto kl = measure_sensitivity(*a->model, *a->weights, backend, scored, trials);
    ASSERT_TRUE(kl.ok()) << kl.error().message;
    EXPECT_EQ((*kl)[0], 0.0);  // the file's own Q4_1 values round back to its bytes
    EXPECT_GT((*kl)[1], (*kl)[2]);
    EXPECT_GT((*kl)[2], (*kl)[3]);
    EXPECT_GT((*kl)[3], 0.0);
    EXPECT_GT((*kl)[4], (*kl)[2]);  // the embedding is also the output head here

    // The evaluator's KL for the same matrix swapped in a second copy: positions 0..63 are
    // what it scores on 65 tokens in one window.
    ASSERT_TRUE(
        b->model->replace_matrix(*backend, m, rounded(*b->weights, m, DType::INT3_G128)).ok());
    eval::EvalOptions opt{65, 65, {}, backend};
    auto e = eval::evaluate(*b->model, a->model.get(), tokens, opt);
    ASSERT_TRUE(e.ok()) << e.error().message;
    EXPECT_NEAR((*kl)[1], e->kl_mean, 1e-3 * e->kl_mean);

    // Back as loaded: exactly the logits of an untouched copy.
    auto c = engine::LoadedModel::load(path, false, backend);
    ASSERT_TRUE(c.ok());
    auto same = eval::evaluate(*a->model, c->model.get(), tokens, opt);
    ASSERT_TRUE(same.ok());
    EXPECT_EQ(same->max_abs_logit_diff, 0.0);
}

TEST(Sensitivity, ClearErrors) {
    const std::string path = ferry::testing::default_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no default model";
    auto backend = ferry::testing::cpu_backend(2);
    auto a = engine::LoadedModel::load(path, false, backend);
    ASSERT_TRUE(a.ok());
    EXPECT_TRUE(a->model->can_replace("blk.29.ffn_down.weight"));
    EXPECT_TRUE(a->model->can_replace("token_embd.weight"));
    EXPECT_FALSE(a->model->can_replace("output.weight"));  // tied: it is token_embd
    EXPECT_FALSE(a->model->can_replace("blk.0.attn_norm.weight"));
    EXPECT_FALSE(a->model->can_replace("blk.30.attn_q.weight"));
    EXPECT_FALSE(a->model->can_replace("blk.x.attn_q.weight"));
    const Tensor q = *a->weights->find("blk.0.attn_q.weight").value();
    auto no_layer = a->model->replace_matrix(*backend, "blk.99.attn_q.weight", q);
    ASSERT_FALSE(no_layer.ok());
    EXPECT_NE(no_layer.error().message.find("blk.99.attn_q.weight"), std::string::npos);
    EXPECT_FALSE(a->model->replace_matrix(*backend, "blk.0.attn_norm.weight", q).ok());
    auto shape = a->model->replace_matrix(*backend, "blk.0.ffn_down.weight", q);
    ASSERT_FALSE(shape.ok());
    EXPECT_NE(shape.error().message.find("576x576"), std::string::npos) << shape.error().message;

    const std::vector<int32_t> tokens = text_tokens(*a, 8);
    const std::vector<SensitivityTrial> odd = {{"blk.0.attn_q.weight", DType::INT4_G128}};
    auto r = measure_sensitivity(*a->model, *a->weights, backend, tokens, odd);
    ASSERT_FALSE(r.ok());  // rows of 576 do not split into groups of 128
    EXPECT_NE(r.error().message.find("576"), std::string::npos) << r.error().message;
    const std::vector<SensitivityTrial> missing = {{"blk.0.nothing.weight", DType::Q8_0}};
    EXPECT_FALSE(measure_sensitivity(*a->model, *a->weights, backend, tokens, missing).ok());
    const std::vector<int32_t> bad = {1, 2, 1 << 30};
    EXPECT_FALSE(measure_sensitivity(*a->model, *a->weights, backend, bad, odd).ok());
}

}  // namespace
}  // namespace ferry::calibrate
