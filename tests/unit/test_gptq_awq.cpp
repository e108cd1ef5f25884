// GPTQ and AWQ (src/calibrate/gptq.*, awq.*, calibration.*, calibrated.*): the group grids agree
// with RTN byte for byte, GPTQ lowers a layer's output error against RTN when its inputs are
// correlated, AWQ never raises it on its samples, and folding AWQ's scales into the real
// model leaves its logits unchanged; SmoothQuant's scales follow the paper's formula, keep the
// float model's logits and cut w8a8's error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "calibrate/awq.h"
#include "calibrate/calibrated.h"
#include "calibrate/calibration.h"
#include "calibrate/gptq.h"
#include "calibrate/pruning.h"
#include "calibrate/smoothquant.h"
#include "engine/loaded_model.h"
#include "engine/model_runner.h"
#include "gguf/gguf_writer.h"
#include "kv/kv_store.h"
#include "model/llama.h"
#include "quant/dequantize.h"
#include "quant/group_grid.h"
#include "quant/quantize.h"
#include "test_util.h"

namespace ferry::calibrate {
using namespace ferry::quant;
namespace {

const DType kGridTypes[] = {DType::Q4_0,      DType::Q4_1,     DType::INT4_G32, DType::INT4_G64,
                            DType::INT4_G128, DType::INT3_G32, DType::INT3_G64, DType::INT3_G128};

// Gaussian values with a few outliers and one all-zero group of 32.
std::vector<float> test_row(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, 0.02f);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = g(rng);
    x[3] = 0.31f;
    x[n / 2 + 1] = -0.27f;
    for (int j = 0; j < 32 && 64 + j < n; ++j) x[64 + j] = 0.0f;
    return x;
}

std::vector<float> dequantize_matrix(DType t, const std::vector<uint8_t>& q, int64_t rows,
                                     int64_t cols) {
    std::vector<float> out(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        EXPECT_TRUE(dequantize_row(t, q.data() + r * row_bytes(t, cols), &out[r * cols], cols));
    return out;
}

std::vector<uint8_t> rtn_matrix(DType t, const std::vector<float>& w, int64_t rows, int64_t cols) {
    std::vector<uint8_t> out(row_bytes(t, cols) * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
        EXPECT_TRUE(quantize_row(t, &w[r * cols], out.data() + r * row_bytes(t, cols), cols));
    return out;
}

// ||X W^T - X Q^T||^2 for X n x cols.
double output_error(const std::vector<float>& x, int64_t n, const std::vector<float>& w,
                    const std::vector<float>& q, int64_t rows, int64_t cols) {
    double sum = 0;
    for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < rows; ++r) {
            double d = 0;
            for (int64_t c = 0; c < cols; ++c)
                d += static_cast<double>(x[t * cols + c]) * (w[r * cols + c] - q[r * cols + c]);
            sum += d * d;
        }
    return sum;
}

TEST(GroupGrid, FitRoundPackReproducesRtn) {
    const int64_t n = 256;
    for (DType t : kGridTypes)
        for (uint32_t seed = 1; seed <= 4; ++seed) {
            const auto x = test_row(n, seed);
            auto rtn = quantize(t, x.data(), n);
            ASSERT_TRUE(rtn.ok());
            const int G = grid_group_size(t);
            std::vector<uint8_t> mine(row_bytes(t, n));
            std::vector<float> values(static_cast<size_t>(n)), deq(static_cast<size_t>(n));
            for (int64_t g = 0; g < n / G; ++g) {
                const GroupParams p = fit_group(t, &x[g * G]);
                uint8_t codes[128];
                for (int j = 0; j < G; ++j) {
                    codes[j] = round_to_grid(t, p, x[g * G + j]);
                    values[g * G + j] = grid_value(t, p, codes[j]);
                }
                pack_group(t, p, codes, mine.data() + g * row_bytes(t, G));
            }
            EXPECT_EQ(mine, *rtn) << dtype_name(t) << " seed " << seed;
            ASSERT_TRUE(dequantize_row(t, mine.data(), deq.data(), n));
            EXPECT_EQ(values, deq) << dtype_name(t);
        }
}

// With H = I no error is fed forward (H^-1's factor is diagonal), so GPTQ is RTN.
TEST(Gptq, IdentityHessianGivesRtnBytes) {
    ThreadPool pool(2);
    const int64_t rows = 8, cols = 256;
    std::vector<double> h(static_cast<size_t>(cols * cols), 0.0);
    for (int64_t i = 0; i < cols; ++i) h[i * cols + i] = 1.0;
    auto hess = prepare_gptq_hessian(h, cols, {}, pool);
    ASSERT_TRUE(hess.ok()) << hess.error().message;
    std::vector<float> w;
    for (int64_t r = 0; r < rows; ++r) {
        const auto row = test_row(cols, 100 + static_cast<uint32_t>(r));
        w.insert(w.end(), row.begin(), row.end());
    }
    for (DType t : kGridTypes) {
        auto q = gptq_quantize(t, w.data(), rows, cols, *hess, pool);
        ASSERT_TRUE(q.ok()) << q.error().message;
        EXPECT_EQ(*q, rtn_matrix(t, w, rows, cols)) << dtype_name(t);
    }
}

// A synthetic layer: inputs X = Z A with a random mixing A (so the channels correlate and
// have unequal scales, as real activations do), Gaussian weights.
struct SyntheticLayer {
    int64_t n = 1024, rows = 48, cols = 256;
    std::vector<float> x, w;
    std::vector<double> h;
};

SyntheticLayer make_layer(int dead_col = -1) {
    SyntheticLayer L;
    std::mt19937 rng(7);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> z(static_cast<size_t>(L.n * L.cols)),
        a(static_cast<size_t>(L.cols * L.cols));
    for (auto& v : z) v = g(rng);
    for (int64_t i = 0; i < L.cols; ++i)
        for (int64_t j = 0; j < L.cols; ++j)
            a[i * L.cols + j] = (i == j ? 1.0f : 0.0f) + 0.15f * g(rng);
    L.x.assign(static_cast<size_t>(L.n * L.cols), 0.0f);
    for (int64_t t = 0; t < L.n; ++t)
        for (int64_t k = 0; k < L.cols; ++k) {
            const float zk = z[t * L.cols + k];
            for (int64_t j = 0; j < L.cols; ++j) L.x[t * L.cols + j] += zk * a[k * L.cols + j];
        }
    for (int64_t t = 0; t < L.n; ++t)
        for (int64_t j = 0; j < L.cols; ++j) {
            L.x[t * L.cols + j] *= 0.5f + static_cast<float>(j % 7);  // unequal channel scales
            if (j == dead_col) L.x[t * L.cols + j] = 0.0f;
        }
    L.w.resize(static_cast<size_t>(L.rows * L.cols));
    for (auto& v : L.w) v = 0.02f * g(rng);
    L.h.assign(static_cast<size_t>(L.cols * L.cols), 0.0);
    for (int64_t t = 0; t < L.n; ++t)
        for (int64_t i = 0; i < L.cols; ++i)
            for (int64_t j = 0; j < L.cols; ++j)
                L.h[i * L.cols + j] += 2.0 * L.x[t * L.cols + i] * L.x[t * L.cols + j] / L.n;
    return L;
}

double gptq_error(const SyntheticLayer& L, DType t, bool act_order,
                  std::vector<float>* deq = nullptr) {
    ThreadPool pool(2);
    GptqOptions opt;
    opt.act_order = act_order;
    auto hess = prepare_gptq_hessian(L.h, L.cols, opt, pool);
    EXPECT_TRUE(hess.ok());
    auto q = gptq_quantize(t, L.w.data(), L.rows, L.cols, *hess, pool);
    EXPECT_TRUE(q.ok());
    auto d = dequantize_matrix(t, *q, L.rows, L.cols);
    if (deq) *deq = d;
    return output_error(L.x, L.n, L.w, d, L.rows, L.cols);
}

double rtn_error(const SyntheticLayer& L, DType t) {
    auto d = dequantize_matrix(t, rtn_matrix(t, L.w, L.rows, L.cols), L.rows, L.cols);
    return output_error(L.x, L.n, L.w, d, L.rows, L.cols);
}

TEST(Gptq, LowersOutputErrorAgainstRtn) {
    const SyntheticLayer L = make_layer();
    for (DType t : {DType::INT4_G32, DType::INT4_G128, DType::Q4_1, DType::Q4_0}) {
        const double rtn = rtn_error(L, t);
        const double gptq = gptq_error(L, t, false);
        const double gptq_ao = gptq_error(L, t, true);
        std::printf("%-9s output error: rtn %.4g, gptq %.4g (%.0f %%), act-order %.4g (%.0f %%)\n",
                    std::string(dtype_name(t)).c_str(), rtn, gptq, 100 * gptq / rtn, gptq_ao,
                    100 * gptq_ao / rtn);
        EXPECT_LT(gptq, 0.8 * rtn) << dtype_name(t);
        EXPECT_LT(gptq_ao, 0.8 * rtn) << dtype_name(t);
    }
}

TEST(Gptq, DeadColumnIsZeroedAndStillBeatsRtn) {
    const int dead = 5;
    const SyntheticLayer L = make_layer(dead);
    EXPECT_EQ(L.h[dead * L.cols + dead], 0.0);
    std::vector<float> deq;
    const double gptq = gptq_error(L, DType::INT4_G32, true, &deq);
    for (int64_t r = 0; r < L.rows; ++r)
        EXPECT_EQ(deq[r * L.cols + dead], 0.0f);  // int4 has an exact 0
    for (float v : deq) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(gptq, 0.8 * rtn_error(L, DType::INT4_G32));
}

// A pruned matrix quantized by GPTQ keeps its zeros (the error of forcing them is fed forward
// like a rounding error), which plain GPTQ would fill in, and still beats rounding to nearest.
TEST(Gptq, KeepZerosKeepsAPrunedPatternAndBeatsRtn) {
    SyntheticLayer L = make_layer();
    ThreadPool pool(2);
    auto parsed = parse_sparsity("2:4");
    ASSERT_TRUE(parsed.ok());
    const SparsityPattern p = *parsed;
    ASSERT_TRUE(prune_by_score(L.w, L.rows, L.cols, p, {}, pool).ok());
    for (DType t : {DType::INT4_G32, DType::Q4_0})
        for (bool act_order : {false, true}) {
            GptqOptions opt;
            opt.act_order = act_order;
            auto hess = prepare_gptq_hessian(L.h, L.cols, opt, pool);
            ASSERT_TRUE(hess.ok());
            auto kept = gptq_quantize(t, L.w.data(), L.rows, L.cols, *hess, pool, true);
            ASSERT_TRUE(kept.ok()) << kept.error().message;
            const auto d = dequantize_matrix(t, *kept, L.rows, L.cols);
            EXPECT_TRUE(follows_pattern(d, L.rows, L.cols, p)) << dtype_name(t);
            for (size_t i = 0; i < d.size(); ++i) {
                if (L.w[i] == 0) {
                    ASSERT_EQ(d[i], 0.0f);
                }
            }
            EXPECT_LT(output_error(L.x, L.n, L.w, d, L.rows, L.cols), 0.9 * rtn_error(L, t))
                << dtype_name(t) << (act_order ? " act-order" : "");
            // Without the flag the error feedback fills the zeros in.
            auto plain = gptq_quantize(t, L.w.data(), L.rows, L.cols, *hess, pool);
            ASSERT_TRUE(plain.ok());
            EXPECT_FALSE(
                follows_pattern(dequantize_matrix(t, *plain, L.rows, L.cols), L.rows, L.cols, p));
        }
    auto hess = prepare_gptq_hessian(L.h, L.cols, GptqOptions{}, pool);
    auto q41 = gptq_quantize(DType::Q4_1, L.w.data(), L.rows, L.cols, *hess, pool, true);
    ASSERT_FALSE(q41.ok());
    EXPECT_NE(q41.error().message.find("0 exactly"), std::string::npos) << q41.error().message;
}

TEST(Awq, SearchNeverWorseThanRtnAndAlphaZeroIsRtn) {
    const SyntheticLayer L = make_layer();
    ThreadPool pool(2);
    std::vector<double> mean(static_cast<size_t>(L.cols), 0.0);
    for (int64_t t = 0; t < L.n; ++t)
        for (int64_t j = 0; j < L.cols; ++j) mean[j] += std::fabs(L.x[t * L.cols + j]) / L.n;
    for (DType t : {DType::INT4_G32, DType::INT4_G128, DType::Q4_1}) {
        FloatMatrix m{L.rows, L.cols, L.w, t};
        const FloatMatrix* mats[] = {&m};
        const AwqResult r = awq_search(mats, mean, L.x, L.n, pool);
        const double rtn = rtn_error(L, t);
        EXPECT_NEAR(r.err_rtn, rtn, 1e-3 * rtn) << dtype_name(t);
        EXPECT_LE(r.err, r.err_rtn);
        std::printf("%-9s awq alpha %.2f: output error %.1f %% of rtn\n",
                    std::string(dtype_name(t)).c_str(), r.alpha, 100 * r.err / r.err_rtn);
        // The reported error is what the scaled, quantized matrix really does on X / s.
        std::vector<float> ws = L.w;
        for (int64_t rr = 0; rr < L.rows; ++rr)
            for (int64_t c = 0; c < L.cols; ++c) ws[rr * L.cols + c] *= r.scale[c];
        auto q = dequantize_matrix(t, rtn_matrix(t, ws, L.rows, L.cols), L.rows, L.cols);
        for (int64_t rr = 0; rr < L.rows; ++rr)
            for (int64_t c = 0; c < L.cols; ++c) q[rr * L.cols + c] /= r.scale[c];
        EXPECT_NEAR(output_error(L.x, L.n, L.w, q, L.rows, L.cols), r.err, 1e-3 * r.err);
    }
}

// ---- the real model --------------------------------------------------------------------

// The default model cut to its first two layers, with those layers' tensors as f32 from
// `floats` (the embedding keeps its bytes): small enough to build in memory.
// Matrices among `floats` are written as `type` (1-D tensors stay f32).
std::vector<uint8_t> two_layer_model(const gguf::File& f, const TensorOverrides& floats,
                                     DType type = DType::F32) {
    gguf::Writer w;
    w.copy_metadata(f);
    const std::string arch = *f.find("general.architecture")->as_string();
    w.set(arch + ".block_count", gguf::make_u32(2));
    for (const auto& t : f.tensors()) {
        if (t.name.rfind("blk.", 0) == 0 && t.name.rfind("blk.0.", 0) != 0 &&
            t.name.rfind("blk.1.", 0) != 0)
            continue;
        auto it = floats.floats.find(t.name);
        if (it == floats.floats.end()) {
            EXPECT_TRUE(w.add_tensor(t.name, t.shape, t.type,
                                     std::vector<uint8_t>(t.data, t.data + t.n_bytes)));
        } else if (type == DType::F32 || t.shape.size() == 1) {
            std::vector<uint8_t> bytes(it->second.size() * sizeof(float));
            std::memcpy(bytes.data(), it->second.data(), bytes.size());
            EXPECT_TRUE(w.add_tensor(t.name, t.shape, DType::F32, std::move(bytes)));
        } else {
            const int64_t cols = t.shape[0], rows = t.n_elements / cols;
            EXPECT_TRUE(
                w.add_tensor(t.name, t.shape, type, rtn_matrix(type, it->second, rows, cols)));
        }
    }
    auto mem = w.write_to_memory();
    EXPECT_TRUE(mem.ok());
    return std::move(*mem);
}

std::vector<float> logits_of(const model::LlamaModel& m, std::span<const int32_t> tokens) {
    engine::ModelRunner runner(m, ferry::testing::cpu_backend(), 1, 256);
    const int32_t block = 0;
    const engine::ModelRunner::Work w{tokens, 0, {&block, 1}, static_cast<int>(tokens.size())};
    const auto logits = runner.run({&w, 1});
    return {logits.begin(), logits.end()};
}

// The first two layers as they are, as floats and as a loaded model.
struct TwoLayers {
    TensorOverrides floats;
    std::vector<uint8_t> bytes;
    std::shared_ptr<gguf::File> file;
    std::unique_ptr<model::LlamaModel> model;
};
TwoLayers plain_two_layers(const gguf::File& f, const model::LlamaConfig& c) {
    TwoLayers t;
    for (int li = 0; li < 2; ++li) {
        auto layer = read_awq_layer(f, c, li);
        EXPECT_TRUE(layer.ok());
        if (!layer.ok()) return t;
        store_awq_layer(*layer, li, t.floats);
    }
    t.bytes = two_layer_model(f, t.floats);
    auto file = gguf::File::parse(t.bytes);
    EXPECT_TRUE(file.ok());
    if (!file.ok()) return t;
    t.file = *file;
    auto m = model::LlamaModel::load(t.file, *ferry::testing::cpu_backend());
    EXPECT_TRUE(m.ok());
    if (m.ok()) t.model = std::move(m).value();
    return t;
}

std::string calib_text() {
    std::ifstream in(ferry::testing::source_dir() + "/data/calib/default.txt");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

TEST(Awq, FoldingScalesIntoTheRealModelKeepsItsLogits) {
    const std::string path = ferry::testing::default_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no default model";
    const auto& lm = ferry::testing::default_model();
    const gguf::File& f = *lm.file;
    const auto& c = lm.model->config();
    TensorOverrides plain, scaled;
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.5f, 1.5f);
    for (int li = 0; li < 2; ++li) {
        auto layer = read_awq_layer(f, c, li);
        ASSERT_TRUE(layer.ok()) << layer.error().message;
        store_awq_layer(*layer, li, plain);
        AwqScales s;
        for (int k = 0; k < model::kLinearInputs; ++k) {
            const int64_t dim = k == 1 ? c.q_dim() : k == 3 ? c.n_ff : c.n_embd;
            s[k].resize(static_cast<size_t>(dim));
            for (auto& v : s[k]) v = std::exp(u(rng));  // factors from 0.22 to 4.5
        }
        // Query heads sharing a kv head must share the attention-output scales.
        const int group = c.n_head / c.n_head_kv;
        for (int h = 0; h < c.n_head; ++h)
            for (int d = 0; d < c.head_dim; ++d)
                s[1][h * c.head_dim + d] = s[1][(h / group * group) * c.head_dim + d];
        fold_awq_scales(*layer, s, c.n_head, c.n_head_kv, c.head_dim);
        store_awq_layer(*layer, li, scaled);
    }
    const auto a_bytes = two_layer_model(f, plain), b_bytes = two_layer_model(f, scaled);
    auto fa = gguf::File::parse(a_bytes), fb = gguf::File::parse(b_bytes);
    ASSERT_TRUE(fa.ok() && fb.ok());
    auto ma = model::LlamaModel::load(*fa, *ferry::testing::cpu_backend()),
         mb = model::LlamaModel::load(*fb, *ferry::testing::cpu_backend());
    ASSERT_TRUE(ma.ok()) << ma.error().message;
    ASSERT_TRUE(mb.ok()) << mb.error().message;
    auto tokens = lm.tokenizer->encode(calib_text(), true);
    tokens.resize(48);
    const auto la = logits_of(**ma, tokens), lb = logits_of(**mb, tokens);
    float max_logit = 0, max_diff = 0;
    for (size_t i = 0; i < la.size(); ++i) {
        max_logit = std::max(max_logit, std::fabs(la[i]));
        max_diff = std::max(max_diff, std::fabs(la[i] - lb[i]));
    }
    std::printf("folded scales: max |logit| %.3f, max |difference| %.3g\n", max_logit, max_diff);
    EXPECT_LT(max_diff, 1e-4f * max_logit);
}

// Calibration and the layer search on the real model's first two layers: every input's
// chosen scales do at least as well as RTN on the samples, and the search does find better
// scales somewhere.
TEST(Awq, RealLayersNeverWorseThanRtn) {
    const std::string path = ferry::testing::default_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no default model";
    const auto& lm = ferry::testing::default_model();
    const gguf::File& f = *lm.file;
    const auto& c = lm.model->config();
    TwoLayers two = plain_two_layers(f, c);
    ASSERT_TRUE(two.model);
    const auto& file = two.file;
    const auto& m = two.model;
    auto tokens = lm.tokenizer->encode(calib_text(), true);
    tokens.resize(256);
    ThreadPool pool(2);
    CalibrationOptions opt;
    opt.abs_mean = true;
    opt.hessian = true;
    opt.n_samples = 64;
    opt.window = 128;
    auto stats = calibrate(*m, ferry::testing::cpu_backend(), tokens, opt);
    ASSERT_TRUE(stats.ok()) << stats.error().message;
    EXPECT_EQ(stats->at(1, model::LinearInput::FfnDown).n_tokens, 256);
    EXPECT_EQ(stats->at(1, model::LinearInput::FfnDown).n_samples, 64);
    EXPECT_EQ(stats->at(0, model::LinearInput::AttnOut).dim, c.q_dim());
    auto layer = read_awq_layer(*file, c, 1);
    ASSERT_TRUE(layer.ok());
    for (FloatMatrix* mat : {&layer->wq, &layer->wk, &layer->wv, &layer->wo, &layer->w_gate,
                             &layer->w_up, &layer->w_down})
        mat->target = mat->cols % 128 == 0 ? DType::INT4_G128 : DType::INT4_G64;
    const auto res = awq_layer(*layer, stats->layers[1], c.n_head, c.n_head_kv, c.head_dim, pool);
    bool improved = false;
    for (const AwqResult& r : res) {
        EXPECT_LE(r.err, r.err_rtn);
        EXPECT_GT(r.err_rtn, 0);
        improved |= r.err < 0.99 * r.err_rtn;
        std::printf("alpha %.2f: %.1f %% of rtn\n", r.alpha, 100 * r.err / r.err_rtn);
    }
    EXPECT_TRUE(improved);
    // GPTQ's Hessians from the same pass are symmetric with a non-negative diagonal.
    const InputStats& st = stats->at(1, model::LinearInput::Attn);
    for (int64_t i = 0; i < st.dim; i += 37) {
        EXPECT_GE(st.hessian[i * st.dim + i], 0.0);
        for (int64_t j = 0; j < st.dim; j += 41)
            EXPECT_NEAR(st.hessian[i * st.dim + j], st.hessian[j * st.dim + i],
                        1e-5 * (1 + std::fabs(st.hessian[i * st.dim + j])));
    }
}

// ---- SmoothQuant ---------------------------------------------------------------------------

// At alpha 0.5 a channel's smoothed activation max and smoothed weight max meet:
// max|X_j| / s_j = max|X_j|^0.5 max|W_j|^0.5 = max|W_j| s_j. alpha 0 leaves activations alone
// up to the weights' scale, alpha 1 makes every activation channel's max 1.
TEST(SmoothQuant, ScalesFollowTheFormula) {
    const int64_t cols = 6;
    FloatMatrix a{2, cols, {0.5f, -1, 0.1f, 2, 0, 0.3f, -0.25f, 0.5f, 0.4f, -1, 0, 0.3f}};
    FloatMatrix b{1, cols, {1, 0.2f, -0.8f, 0.5f, 0, 0.1f}};
    const FloatMatrix* mats[] = {&a, &b};
    const std::vector<double> act = {10, 0.5, 300, 1, 4, 0};  // an outlier and a dead channel
    const double wmax[] = {1, 1, 0.8, 2, 0, 0.3};
    const auto s = smooth_scales(act, mats, 0.5);
    for (int64_t j = 0; j < 4; ++j) {
        EXPECT_NEAR(s[j], std::sqrt(act[j] / wmax[j]), 1e-6 * s[j]) << j;
        EXPECT_NEAR(act[j] / s[j], wmax[j] * s[j], 1e-5 * act[j] / s[j]) << j;
    }
    for (float v : s) EXPECT_TRUE(std::isfinite(v) && v > 0);
    EXPECT_NEAR(s[4], std::sqrt(4 / 1e-5), 1);  // all-zero column: clamped, not infinite
    const auto s1 = smooth_scales(act, mats, 1.0);
    for (int64_t j = 0; j < 4; ++j) EXPECT_NEAR(act[j] / s1[j], 1.0, 1e-6) << j;
    EXPECT_DOUBLE_EQ(channel_spread(act), 300.0 / 4);  // max over the median (upper middle)
    std::vector<double> after(act.size());
    for (size_t j = 0; j < act.size(); ++j) after[j] = act[j] / s[j];
    EXPECT_LT(channel_spread(after), channel_spread(act) / 3);
}

// On the default model's first two layers: smoothing with calibrated maxima leaves the float
// model's logits where they were, and rounding the smoothed layers to w8a8 lands closer to the
// float logits than rounding the plain ones (the outlier channels no longer set each token's
// activation grid).
TEST(SmoothQuant, RealLayersKeepLogitsAndCutW8A8Error) {
    const std::string path = ferry::testing::default_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no default model";
    const auto& lm = ferry::testing::default_model();
    const gguf::File& f = *lm.file;
    const auto& c = lm.model->config();
    TwoLayers two = plain_two_layers(f, c);
    ASSERT_TRUE(two.model);
    const TensorOverrides& plain = two.floats;
    const auto& plain_file = two.file;
    const auto& plain_model = two.model;
    auto tokens = lm.tokenizer->encode(calib_text(), true);
    tokens.resize(256);
    ThreadPool pool(2);
    CalibrationOptions opt;
    opt.abs_max = true;
    opt.window = 128;
    auto stats = calibrate(*plain_model, ferry::testing::cpu_backend(), tokens, opt);
    ASSERT_TRUE(stats.ok()) << stats.error().message;
    for (const InputStats& st : stats->layers[0]) ASSERT_EQ(st.abs_max.size(), size_t(st.dim));
    TensorOverrides smooth;
    for (int li = 0; li < 2; ++li) {
        auto layer = read_awq_layer(*plain_file, c, li);
        ASSERT_TRUE(layer.ok());
        const SmoothResult r = smoothquant_layer(*layer, stats->layers[static_cast<size_t>(li)],
                                                 0.5, c.n_head, c.n_head_kv, c.head_dim);
        for (int k = 0; k < model::kLinearInputs; ++k)
            EXPECT_LE(r.spread_after[k], r.spread_before[k] * 1.0001) << li << " " << k;
        store_awq_layer(*layer, li, smooth);
    }
    auto logits = [&](const TensorOverrides& o, DType type) {
        const auto bytes = two_layer_model(f, o, type);
        auto file = gguf::File::parse(bytes);
        EXPECT_TRUE(file.ok());
        auto m = model::LlamaModel::load(*file, *ferry::testing::cpu_backend());
        EXPECT_TRUE(m.ok());
        const std::vector<int32_t> probe(tokens.begin() + 100, tokens.begin() + 164);
        return logits_of(**m, probe);
    };
    const auto ref = logits(plain, DType::F32);
    auto distance = [&](const std::vector<float>& l) {
        double d = 0;
        for (size_t i = 0; i < l.size(); ++i) d += std::fabs(l[i] - ref[i]);
        return d / static_cast<double>(l.size());
    };
    float max_logit = 0;
    for (float v : ref) max_logit = std::max(max_logit, std::fabs(v));
    const auto smooth_f32 = logits(smooth, DType::F32);
    float max_diff = 0;
    for (size_t i = 0; i < ref.size(); ++i)
        max_diff = std::max(max_diff, std::fabs(smooth_f32[i] - ref[i]));
    EXPECT_LT(max_diff, 1e-4f * max_logit);
    const double err_plain = distance(logits(plain, DType::W8A8));
    const double err_smooth = distance(logits(smooth, DType::W8A8));
    std::printf("w8a8 mean |logit error|: plain %.4f, smoothed %.4f\n", err_plain, err_smooth);
    EXPECT_GT(err_plain, 0.0);
    EXPECT_LT(err_smooth, 0.8 * err_plain);
}

// Sequential pruning's pass for layer L: an observer that wants layers up to L stops a pass that
// wants no logits after L, and the statistics of L are those of a pass through every layer.
struct LayersSeen final : model::ActivationObserver {
    explicit LayersSeen(int last) : last(last) {}
    void observe(int layer, model::LinearInput, const Tensor&) override {
        deepest = std::max(deepest, layer);
    }
    int last_layer() const override { return last; }
    int last, deepest = -1;
};

TEST(Calibration, OneLayersPassStopsAfterItWithTheWholePassStatistics) {
    const std::string path = ferry::testing::default_model_path();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no default model";
    const auto& lm = ferry::testing::default_model();
    const auto& m = *lm.model;
    auto tokens = lm.tokenizer->encode(calib_text(), true);
    tokens.resize(64);
    for (const int last : {-1, 0, 5}) {
        engine::ModelRunner runner(m, ferry::testing::cpu_backend(), 1, 256);
        LayersSeen seen(last);
        runner.set_observer(&seen);
        const int32_t block = 0;
        const engine::ModelRunner::Work w{tokens, 0, {&block, 1}, 0};
        runner.run({&w, 1});
        EXPECT_EQ(seen.deepest, last < 0 ? m.config().n_layer - 1 : last);
    }
    CalibrationOptions opt;
    opt.sq_mean = true;
    opt.window = 32;
    auto all = calibrate(m, ferry::testing::cpu_backend(), tokens, opt);
    opt.only_layer = 5;
    auto one = calibrate(m, ferry::testing::cpu_backend(), tokens, opt);
    ASSERT_TRUE(all.ok() && one.ok());
    for (int i = 0; i < model::kLinearInputs; ++i) {
        const auto which = static_cast<model::LinearInput>(i);
        EXPECT_EQ(one->at(5, which).sq_mean, all->at(5, which).sq_mean);
        EXPECT_EQ(one->at(5, which).n_tokens, 64);
        EXPECT_EQ(one->at(6, which).n_tokens, 0);
        EXPECT_EQ(one->at(4, which).n_tokens, 0);
    }
}

}  // namespace
}  // namespace ferry::calibrate
