#include "eval/evaluator.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/loaded_model.h"
#include "gguf/gguf_writer.h"
#include "quant/dequantize.h"
#include "quant/quantize.h"
#include "test_util.h"

namespace ferry::eval {
using engine::LoadedModel;
namespace {

struct Fixture {
    LoadedModel lm;
    std::vector<int32_t> tokens;
};

// Loaded once: every test here runs the real default model on a short slice of the shipped
// evaluation text.
Fixture* fixture() {
    static Fixture* f = []() -> Fixture* {
        const std::string path = ferry::testing::default_model_path();
        if (!std::filesystem::exists(path)) return nullptr;
        auto lm = LoadedModel::load(path, false);
        if (!lm.ok()) return nullptr;
        std::ifstream in(ferry::testing::source_dir() + "/data/eval/lighthouse.txt");
        std::stringstream ss;
        ss << in.rdbuf();
        auto* fx = new Fixture{std::move(lm).value(), {}};
        fx->tokens = fx->lm.tokenizer->encode(ss.str(), true);
        return fx;
    }();
    return f;
}

std::span<const int32_t> first(const Fixture& f, size_t n) {
    return std::span<const int32_t>(f.tokens).first(std::min(n, f.tokens.size()));
}

TEST(Evaluator, ModelAgainstItselfHasZeroKlAndFullAgreement) {
    Fixture* f = fixture();
    if (!f) GTEST_SKIP() << "no default model";
    EvalOptions opt{48, 16, {}, nullptr};
    auto r = evaluate(*f->lm.model, f->lm.model.get(), first(*f, 100), opt);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->n_scored, 99);
    EXPECT_EQ(r->kl_mean, 0.0);
    EXPECT_EQ(r->kl_p99, 0.0);
    EXPECT_EQ(r->top1_agreement, 1.0);
    EXPECT_EQ(r->max_abs_logit_diff, 0.0);
    EXPECT_DOUBLE_EQ(r->perplexity, r->ref_perplexity);
    EXPECT_GT(r->perplexity, 1.0);
    EXPECT_LT(r->perplexity, 200.0);  // SmolLM2 on plain English prose
}

TEST(Evaluator, ScoresEveryTokenOnceWhateverTheWindows) {
    Fixture* f = fixture();
    if (!f) GTEST_SKIP() << "no default model";
    const auto toks = first(*f, 70);
    double nll_full = 0;
    for (auto [ctx, stride] : {std::pair{70, 70}, {32, 32}, {32, 8}, {16, 15}}) {
        auto r = evaluate(*f->lm.model, nullptr, toks, {ctx, stride, {}, nullptr});
        ASSERT_TRUE(r.ok()) << r.error().message;
        // HF's convention: a window's first token has no prediction, so with stride == ctx
        // (no overlap) every window after the first loses one token; with overlap none does.
        const int64_t lost = stride == ctx ? r->n_windows - 1 : 0;
        EXPECT_EQ(r->n_scored, 69 - lost) << ctx << "/" << stride;
        if (ctx == 70) {
            EXPECT_EQ(r->n_windows, 1);
            nll_full = r->nll;
        } else {
            // Less context per token: about as good as the whole text at once, or worse.
            EXPECT_GT(r->nll, nll_full - 0.3) << ctx << "/" << stride;
            EXPECT_LT(r->nll, nll_full + 2.0) << ctx << "/" << stride;
        }
    }
    EXPECT_FALSE(evaluate(*f->lm.model, nullptr, toks, {16, 32, {}, nullptr}).ok());
    EXPECT_FALSE(evaluate(*f->lm.model, nullptr, toks.first(1), {16, 8, {}, nullptr}).ok());
}

// Q4_1 → dequantize → Q8_0 adds little error on top of Q4_1's, so the re-quantized model
// should almost always pick the original's next token.
TEST(Evaluator, Q8RequantizationAgreesWithTheOriginal) {
    Fixture* f = fixture();
    if (!f) GTEST_SKIP() << "no default model";
    const gguf::File& in = *f->lm.file;
    gguf::Writer w;
    w.copy_metadata(in);
    for (const auto& t : in.tensors()) {
        if (t.shape.size() == 1 || t.shape[0] % 32 != 0) {
            ASSERT_TRUE(w.add_tensor(t.name, t.shape, t.type,
                                     std::vector<uint8_t>(t.data, t.data + t.n_bytes))
                            .ok());
            continue;
        }
        std::vector<float> x(static_cast<size_t>(t.n_elements));
        ASSERT_TRUE(quant::dequantize_row(t.type, t.data, x.data(), t.n_elements).ok());
        auto q = quant::quantize(DType::Q8_0, x.data(), t.n_elements);
        ASSERT_TRUE(q.ok());
        ASSERT_TRUE(w.add_tensor(t.name, t.shape, DType::Q8_0, std::move(q).value()).ok());
    }
    const std::string out = ::testing::TempDir() + "/ferry_eval_q8.gguf";
    ASSERT_TRUE(w.write(out).ok());
    auto file = gguf::File::open(out);
    ASSERT_TRUE(file.ok()) << file.error().message;
    auto q8 = model::LlamaModel::load(*file, *ferry::testing::cpu_backend());
    ASSERT_TRUE(q8.ok()) << q8.error().message;

    auto r = evaluate(**q8, f->lm.model.get(), first(*f, 512), {256, 128, {}, nullptr});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_GE(r->top1_agreement, 0.95);
    EXPECT_GT(r->kl_mean, 0.0);
    EXPECT_LT(r->kl_mean, 0.05);
    EXPECT_LE(r->kl_mean, r->kl_p99 + 1e-12);
    EXPECT_NEAR(r->perplexity / r->ref_perplexity, 1.0, 0.03);
    std::filesystem::remove(out);
}

}  // namespace
}  // namespace ferry::eval
