// The forward pass against references we did not write: llama.cpp (through llama-cpp-python,
// see scripts/gen-golden.sh) and an exact float64 NumPy forward pass over gguf-py's dequantized
// weights (scripts/ref_forward.py). Golden files live in tests/golden/.
//
// Why the tolerances are what they are: the two references themselves differ by up to 1.15 in
// a logit (RMS up to 0.39) on these prompts, because llama.cpp quantizes activations to 8 bits
// before its Q4_1/Q8_0 dot products and keeps the KV cache in f16, while the NumPy reference is
// exact (float64 over gguf-py's dequantized weights). With float activations
// (Activations::F32) ferry computes in float32 what the exact reference computes, so it must
// agree to 0.01 (measured: under 1e-4; f32 rounding alone is ~5e-5). With 16-bit integer
// activations (the default) each block of 32 activations is rounded to steps of amax / 16256
// before the integer products; measured against the exact reference that moves logits by at
// most 0.013 (RMS 0.004), so the bound is 0.05 (RMS 0.02): still 30x tighter than what
// llama.cpp's 8-bit activations give, and far below what a real bug gives (the wrong rope style
// moves logits by ~10). Against llama.cpp we allow what separates the two references: max abs
// diff 1.5, RMS 0.5. The argmax must be llama.cpp's, unless llama.cpp's own top-1/top-2 margin
// is inside that noise, when ferry's pick must be one of its top two.
//
// With 8-bit activations (Activations::Int8, like llama.cpp) a logit's distance from the exact
// reference is a draw from a wide spread, not a property of the code: ferry's scalar, AVX2 and
// AVX-512 levels round their float steps in different orders, on a grid of amax / 127 that
// flips a few roundings per layer, and the flips compound. scripts/activation_noise.py samples
// the spread from the NumPy reference (16 draws): on chat_capital RMS 0.21-1.15 and max
// 0.86-2.22 (ferry measured 0.25 / 0.44 / 0.86 RMS at avx512 / scalar / avx2; llama.cpp 0.39);
// averaged over the prompts RMS 0.17-0.34. So Int8 is held per prompt to max 3.0 / RMS 1.5 (a
// real bug moves logits by ~10) and, where a systematic error would show, to a mean RMS over
// the prompts of 0.45. llama.cpp is one more such draw, so the same bounds hold against it.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "engine/loaded_model.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"
#include "test_util.h"

using ferry::engine::Generator;
using ferry::engine::LoadedModel;

namespace {

using ferry::kernels::Activations;

struct Bound {
    float max_abs, rms;
};
// Against llama.cpp, by activation mode.
Bound llama_bound(Activations a) {
    return a == Activations::Int8 ? Bound{3.0f, 1.5f} : Bound{1.5f, 0.5f};
}
// Against the exact reference, by activation mode.
Bound exact_bound(Activations a) {
    switch (a) {
        case Activations::F32:
            return {0.01f, 0.01f};
        case Activations::Int16:
            return {0.05f, 0.02f};
        default:
            return {3.0f, 1.5f};
    }
}
// The mean over the prompts of the RMS distance to the exact reference.
float exact_mean_rms_bound(Activations a) {
    return a == Activations::Int8 ? 0.45f : exact_bound(a).rms;
}

// Runs a test body under one activation mode and restores the one before.
class GoldenModel : public ::testing::TestWithParam<Activations> {
  protected:
    void SetUp() override {
        saved_ = ferry::kernels::cpu::activations();
        ferry::kernels::cpu::set_activations(GetParam());
    }
    void TearDown() override { ferry::kernels::cpu::set_activations(saved_); }
    Activations saved_ = Activations::F32;
};
class GoldenGreedy : public GoldenModel {};
constexpr float kNoiseMargin = 0.5f;  // a top-1/top-2 gap below this is within numeric noise

const LoadedModel& model() {
    return ferry::testing::default_model();
}

nlohmann::json load_json(const std::string& rel) {
    std::ifstream in(ferry::testing::golden_dir() + "/" + rel);
    if (!in) throw std::runtime_error("golden file missing: " + rel);
    return nlohmann::json::parse(in);
}

std::vector<float> load_f32(const std::string& rel, size_t n) {
    std::ifstream in(ferry::testing::golden_dir() + "/" + rel, std::ios::binary);
    if (!in) throw std::runtime_error("golden file missing: " + rel);
    std::vector<float> v(n);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
    if (!in) throw std::runtime_error("golden file short: " + rel);
    return v;
}

struct Diff {
    float max_abs = 0;
    double rms = 0;
};
Diff diff(const std::vector<float>& a, const std::vector<float>& b) {
    Diff d;
    for (size_t i = 0; i < a.size(); ++i) {
        const float e = std::fabs(a[i] - b[i]);
        d.max_abs = std::max(d.max_abs, e);
        d.rms += double(e) * e;
    }
    d.rms = std::sqrt(d.rms / double(a.size()));
    return d;
}

int argmax(const std::vector<float>& v) {
    return int(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

TEST_P(GoldenModel, FinalLogitsMatchLlamaCppAndExactReference) {
    auto index = load_json("logits/index.json");
    const size_t n_vocab = index["n_vocab"];
    ASSERT_EQ(n_vocab, size_t(model().model->config().n_vocab));
    ASSERT_GE(index["prompts"].size(), 5u);
    Generator gen(*model().model, ferry::testing::cpu_backend(2), 1024);
    double sum_exact_rms = 0;
    for (const auto& p : index["prompts"]) {
        const std::string name = p["name"];
        const auto ids = p["ids"].get<std::vector<int32_t>>();
        // The tokenizer must give the ids llama.cpp evaluated.
        EXPECT_EQ(model().tokenizer->encode(p["text"].get<std::string>(), false, true), ids)
            << name;
        auto logits = gen.logits_for(ids);
        ASSERT_TRUE(logits.ok()) << logits.error().message;
        const auto ref = load_f32("logits/" + p["file"].get<std::string>(), n_vocab);
        const auto exact = load_f32("logits/" + p["numpy_file"].get<std::string>(), n_vocab);

        const Diff dl = diff(*logits, ref), dx = diff(*logits, exact);
        sum_exact_rms += dx.rms;
        const Bound lb = llama_bound(GetParam());
        EXPECT_LE(dl.max_abs, lb.max_abs) << name << " vs llama.cpp";
        EXPECT_LE(dl.rms, lb.rms) << name << " vs llama.cpp";
        const Bound bound = exact_bound(GetParam());
        EXPECT_LE(dx.max_abs, bound.max_abs) << name << " vs exact";
        EXPECT_LE(dx.rms, bound.rms) << name << " vs exact";

        const int top = argmax(*logits);
        const auto top10 = p["top10"].get<std::vector<int>>();
        if (p["top1_top2_margin"].get<float>() > kNoiseMargin)
            EXPECT_EQ(top, top10[0]) << name;
        else
            EXPECT_TRUE(top == top10[0] || top == top10[1]) << name << " picked " << top;
        std::printf(
            "[ logits %s ] %-16s vs llama.cpp max %.3f rms %.3f | vs exact max %.3f rms %.3f\n",
            ferry::kernels::activations_name(GetParam()), name.c_str(), dl.max_abs, dl.rms,
            dx.max_abs, dx.rms);
    }
    const double mean_rms = sum_exact_rms / double(index["prompts"].size());
    EXPECT_LE(mean_rms, exact_mean_rms_bound(GetParam())) << "mean RMS vs exact";
    std::printf("[ logits %s ] mean RMS vs exact %.3f\n",
                ferry::kernels::activations_name(GetParam()), mean_rms);
}

// Greedy continuations must equal llama.cpp's token for token. A divergence is accepted only
// at a step where llama.cpp's own top-1/top-2 margin was inside numeric noise (after which the
// two texts are different contexts and comparing further means nothing).
TEST_P(GoldenGreedy, GreedyContinuationsMatchLlamaCpp) {
    auto golden = load_json("greedy.json");
    ASSERT_GE(golden["cases"].size(), 5u);
    Generator gen(*model().model, ferry::testing::cpu_backend(2), 1024);
    ferry::engine::SamplingParams greedy;
    greedy.temperature = 0;
    int identical = 0, total = 0;
    for (const auto& c : golden["cases"]) {
        const std::string name = c["name"];
        const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
        const auto want = c["ids"].get<std::vector<int32_t>>();
        const auto margins = c["margins"].get<std::vector<float>>();
        std::vector<int32_t> got;
        gen.reset();
        auto st = gen.generate(
            prompt, greedy, static_cast<int>(want.size()),
            [&](int32_t t) {
                got.push_back(t);
                return true;
            },
            [&](int32_t t) {
                if (model().tokenizer->is_eog(t)) got.push_back(t);  // the reference keeps it
                return model().tokenizer->is_eog(t);
            });
        ASSERT_TRUE(st.ok());
        // With float or 16-bit activations ferry computes what the exact reference computes to
        // within 0.013 of a logit: its greedy text must be the reference's to the token (the
        // references' smallest top-2 gap on these cases is ~100x the float32 rounding error).
        if (c.contains("numpy_ids")) {
            EXPECT_EQ(got, c["numpy_ids"].get<std::vector<int32_t>>()) << name << " vs exact";
        }
        size_t k = 0;
        while (k < want.size() && k < got.size() && got[k] == want[k]) ++k;
        ++total;
        if (k == want.size() && got.size() == want.size()) {
            ++identical;
            continue;
        }
        ASSERT_LT(k, margins.size()) << name;
        EXPECT_LT(margins[k], kNoiseMargin)
            << name << ": diverged at step " << k << " where llama.cpp's margin was " << margins[k]
            << " (a real difference, not noise)";
        std::printf("[ greedy ] %-16s diverged at step %zu (llama.cpp margin %.3f)\n", name.c_str(),
                    k, margins[k]);
    }
    std::printf("[ greedy ] %d of %d continuations identical to llama.cpp\n", identical, total);
    EXPECT_GE(identical * 2, total) << "most continuations should match exactly";
}

auto mode_name = [](const auto& info) {
    return std::string(ferry::kernels::activations_name(info.param));
};
INSTANTIATE_TEST_SUITE_P(Activations, GoldenModel,
                         ::testing::Values(Activations::F32, Activations::Int16, Activations::Int8),
                         mode_name);
// Greedy texts under 8-bit activations part from llama.cpp's at steps where its margin is
// small but not within this file's noise rule (8-bit rounding is not llama.cpp's own rounding),
// so the greedy comparison runs for the modes that compute the exact reference's numbers.
INSTANTIATE_TEST_SUITE_P(Activations, GoldenGreedy,
                         ::testing::Values(Activations::F32, Activations::Int16), mode_name);
