// Hyper-parameters a checkpoint may not hold, refused at load with the key and its value instead
// of run: a RoPE base or RMSNorm epsilon that is not positive and finite (every activation
// would be NaN), an activation the model does not compute (it would run as SiLU), and a layer
// count below the layers the file's tensors hold (the rest would be ignored). GGUF files and
// Hugging Face directories alike.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "convert_util.h"
#include "engine/loaded_model.h"
#include "gguf/gguf_writer.h"
#include "model/llama_config.h"
#include "test_util.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

std::string golden_llama() {
    return testing::golden_dir() + "/hf_models/llama";
}

nlohmann::json llama_config() {
    std::ifstream in(golden_llama() + "/config.json");
    return nlohmann::json::parse(in);
}

// The load's error; empty when it loaded.
std::string load_error(const std::string& path) {
    auto lm = engine::LoadedModel::load(path, false);
    return lm.ok() ? std::string() : lm.error().message;
}

// The golden llama directory as an f32 GGUF, its metadata edited.
std::string edited_gguf(const std::function<void(gguf::Writer&)>& edit) {
    const std::string path = (fs::path(::testing::TempDir()) / "model-config.gguf").string();
    testing::write_f32_gguf(golden_llama(), path, edit);
    return path;
}

// A copy of the golden llama directory, its config.json edited.
std::string edited_dir(const std::function<void(nlohmann::json&)>& edit) {
    const fs::path dst = fs::path(::testing::TempDir()) / "model-config-dir";
    fs::remove_all(dst);
    fs::create_directories(dst);
    for (const auto& f : fs::directory_iterator(golden_llama()))
        fs::copy(f.path(), dst / f.path().filename());
    nlohmann::json cfg = llama_config();
    edit(cfg);
    std::ofstream(dst / "config.json") << cfg.dump(1);
    return dst.string();
}

std::string config_error(const nlohmann::json& j) {
    auto c = model::read_llama_config(j, "c.json");
    return c.ok() ? std::string() : c.error().message;
}

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(ModelConfig, GgufRopeBaseAndNormEpsilonMustBePositiveAndFinite) {
    EXPECT_EQ(load_error(edited_gguf({})), "");
    for (const char* key : {"llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon"}) {
        for (float v : {0.0f, -1.0f, kNan, kInf}) {
            const std::string e =
                load_error(edited_gguf([&](gguf::Writer& w) { w.set(key, gguf::make_f32(v)); }));
            EXPECT_NE(e.find(std::string(key) + " is "), std::string::npos) << v << ": " << e;
            EXPECT_NE(e.find("must be a positive finite number"), std::string::npos) << e;
        }
    }
}

TEST(ModelConfig, HfRopeThetaAndNormEpsilonMustBePositiveAndFinite) {
    ASSERT_EQ(config_error(llama_config()), "");
    for (const char* key : {"rope_theta", "rms_norm_eps"}) {
        for (double v : {0.0, -1.0, 1e300}) {  // 1e300 is an infinite float
            nlohmann::json j = llama_config();
            j.erase("rope_parameters");  // its rope_theta would override the top level's
            j[key] = v;
            const std::string e = config_error(j);
            EXPECT_NE(e.find(std::string(key) + " is "), std::string::npos) << v << ": " << e;
            EXPECT_NE(e.find("must be a positive finite number"), std::string::npos) << e;
        }
    }
}

TEST(ModelConfig, HfActivationsTheModelDoesNotComputeAreRefusedByName) {
    nlohmann::json j = llama_config();
    for (const char* act : {"silu", "swish"}) {
        j["hidden_act"] = act;
        EXPECT_EQ(config_error(j), "") << act;
    }
    for (const nlohmann::json& act :
         {nlohmann::json("relu"), nlohmann::json("gelu"), nlohmann::json(3)}) {
        j["hidden_act"] = act;
        const std::string e = config_error(j);
        EXPECT_NE(e.find("hidden_act " + act.dump() + " is not supported"), std::string::npos) << e;
        EXPECT_NE(e.find("silu"), std::string::npos) << e;
    }
    // Gemma's is hidden_activation (test_gemma3.cpp); transformers ignores its hidden_act.
    std::ifstream in(testing::golden_dir() + "/hf_models/gemma3/config.json");
    nlohmann::json gemma = nlohmann::json::parse(in);
    gemma["hidden_act"] = "gelu";
    EXPECT_EQ(config_error(gemma), "");
}

TEST(ModelConfig, ALayerCountBelowTheFilesLayersIsRefused) {
    const int n_layer = llama_config()["num_hidden_layers"].get<int>();
    ASSERT_GT(n_layer, 1);
    const std::string g = load_error(
        edited_gguf([](gguf::Writer& w) { w.set("llama.block_count", gguf::make_u32(1)); }));
    EXPECT_NE(g.find("tensor 'blk.1."), std::string::npos) << g;
    EXPECT_NE(g.find("past the 1 layers the model declares (llama.block_count)"), std::string::npos)
        << g;
    const std::string h =
        load_error(edited_dir([](nlohmann::json& j) { j["num_hidden_layers"] = 1; }));
    EXPECT_NE(h.find("tensor 'model.layers.1."), std::string::npos) << h;
    EXPECT_NE(h.find("(num_hidden_layers)"), std::string::npos) << h;
    EXPECT_EQ(load_error(edited_dir([](nlohmann::json&) {})), "");
}

}  // namespace
}  // namespace ferry
