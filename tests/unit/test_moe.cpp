// Mixtures of experts (model/moe.h): the router's choice and weights, the config keys of
// Mixtral, Qwen2-MoE and Qwen3-MoE, and inconsistent checkpoints refused with one message. The
// backend op that adds the experts' outputs back is test_backend.cpp's; that the whole forward
// pass equals transformers' is test_hf_models.cpp's (the mixtral, qwen3_moe, qwen2_moe dirs).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "convert/hf_to_gguf.h"
#include "convert_util.h"
#include "engine/loaded_model.h"
#include "gguf/gguf_writer.h"
#include "hf/model_dir.h"
#include "model/llama_config.h"
#include "model/moe.h"
#include "test_util.h"

namespace fs = std::filesystem;
using ferry::model::LlamaConfig;
using ferry::model::Routing;

namespace {

LlamaConfig moe(int n_expert, int used, bool norm) {
    LlamaConfig c;
    c.n_layer = 1;
    c.n_expert = n_expert;
    c.n_expert_used = used;
    c.expert_norm = norm;
    return c;
}

nlohmann::json golden_config(const std::string& name) {
    std::ifstream in(ferry::testing::golden_dir() + "/hf_models/" + name + "/config.json");
    return nlohmann::json::parse(in);
}

// A copy of a golden directory with its config.json edited.
std::string edited_dir(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    const fs::path src = ferry::testing::golden_dir() + "/hf_models/" + name;
    const fs::path dst = fs::path(::testing::TempDir()) / ("moe-edited-" + name);
    fs::remove_all(dst);
    fs::create_directories(dst);
    for (const auto& f : fs::directory_iterator(src)) fs::copy(f.path(), dst / f.path().filename());
    nlohmann::json cfg = golden_config(name);
    edit(cfg);
    std::ofstream(dst / "config.json") << cfg.dump(1);
    return dst.string();
}

}  // namespace

TEST(MoeRouting, TopKBySoftmaxRenormalisedOrNot) {
    // Token 0 prefers experts 2 then 0; token 1 experts 3 then 1.
    const std::vector<float> logits = {1.0f,  0.0f, 2.0f, -1.0f,  //
                                       -2.0f, 0.5f, 0.0f, 3.0f};
    Routing r;
    ferry::model::route(moe(4, 2, true), logits, 2, r);
    ASSERT_EQ(r.tokens.size(), 4u);
    EXPECT_EQ(r.tokens[0], std::vector<int32_t>{0});
    EXPECT_EQ(r.tokens[1], std::vector<int32_t>{1});
    EXPECT_EQ(r.tokens[2], std::vector<int32_t>{0});
    EXPECT_EQ(r.tokens[3], std::vector<int32_t>{1});
    // Renormalised over the chosen two: softmax of their logits alone.
    const float w2 = 1.0f / (1.0f + std::exp(-1.0f));
    EXPECT_NEAR(r.weights[2][0], w2, 1e-6f);
    EXPECT_NEAR(r.weights[0][0], 1.0f - w2, 1e-6f);

    // Not renormalised (Qwen2-MoE): the softmax over all four.
    ferry::model::route(moe(4, 2, false), logits, 2, r);
    const double z = std::exp(1.0) + 1.0 + std::exp(2.0) + std::exp(-1.0);
    EXPECT_NEAR(r.weights[2][0], std::exp(2.0) / z, 1e-6);
    EXPECT_NEAR(r.weights[0][0], std::exp(1.0) / z, 1e-6);

    // expert_scale multiplies every weight.
    LlamaConfig c = moe(4, 2, true);
    c.expert_scale = 2.5f;
    ferry::model::route(c, logits, 2, r);
    EXPECT_NEAR(r.weights[2][0], 2.5f * w2, 1e-5f);
}

TEST(MoeRouting, TiesGoToTheLowerExpertAsTorchTopkDoes) {
    const std::vector<float> logits = {0.5f, 1.0f, 1.0f, 1.0f};
    Routing r;
    ferry::model::route(moe(4, 2, true), logits, 1, r);
    EXPECT_EQ(r.tokens[1].size(), 1u);
    EXPECT_EQ(r.tokens[2].size(), 1u);
    EXPECT_TRUE(r.tokens[0].empty());
    EXPECT_TRUE(r.tokens[3].empty());
    EXPECT_NEAR(r.weights[1][0], 0.5f, 1e-6f);
}

TEST(MoeLoad, SummarisesTokensPerExpert) {
    LlamaConfig c = moe(4, 2, true);
    c.n_layer = 2;
    // Layer 0 even, layer 1 all on expert 3 and 0.
    const std::vector<int64_t> counts = {5, 5, 5, 5, 10, 0, 0, 10};
    const auto l = ferry::model::expert_load(c, counts);
    EXPECT_EQ(l.per_expert, (std::vector<int64_t>{15, 5, 5, 15}));
    EXPECT_DOUBLE_EQ(l.mean, 10.0);
    EXPECT_EQ(l.min, 5);
    EXPECT_EQ(l.max, 15);
    EXPECT_DOUBLE_EQ(l.imbalance, 1.5);
    EXPECT_DOUBLE_EQ(l.worst_layer_imbalance, 2.0);
    EXPECT_EQ(ferry::model::expert_load(LlamaConfig{}, {}).n_expert, 0);  // dense
}

TEST(MoeConfig, ReadsEachFamilysKeys) {
    auto mixtral = ferry::model::read_llama_config(golden_config("mixtral"), "mixtral");
    ASSERT_TRUE(mixtral.ok()) << mixtral.error().message;
    EXPECT_EQ(mixtral->arch, "llama");
    EXPECT_EQ(mixtral->n_expert, 4);
    EXPECT_EQ(mixtral->n_expert_used, 2);
    EXPECT_EQ(mixtral->n_ff_expert, 96);  // intermediate_size is one expert's
    EXPECT_TRUE(mixtral->expert_norm);

    auto q3 = ferry::model::read_llama_config(golden_config("qwen3_moe"), "qwen3_moe");
    ASSERT_TRUE(q3.ok()) << q3.error().message;
    EXPECT_EQ(q3->arch, "qwen3moe");
    EXPECT_TRUE(q3->qk_norms);
    EXPECT_EQ(q3->n_expert, 8);  // transformers 5 spells it num_local_experts here
    EXPECT_EQ(q3->n_ff_expert, 32);
    EXPECT_TRUE(q3->expert_norm);
    EXPECT_EQ(q3->n_ff_shared, 0);

    auto q2 = ferry::model::read_llama_config(golden_config("qwen2_moe"), "qwen2_moe");
    ASSERT_TRUE(q2.ok()) << q2.error().message;
    EXPECT_EQ(q2->arch, "qwen2moe");
    EXPECT_FALSE(q2->expert_norm);
    EXPECT_EQ(q2->n_ff_shared, 96);
}

TEST(MoeConfig, RefusesLayoutsItDoesNotRun) {
    struct Case {
        const char* key;
        nlohmann::json value;
        const char* says;
    };
    for (const Case& c : {Case{"decoder_sparse_step", 2, "decoder_sparse_step 2"},
                          Case{"mlp_only_layers", nlohmann::json::array({0}), "mlp_only_layers"},
                          Case{"num_experts_per_tok", 9, "9 experts used of 8"}}) {
        nlohmann::json j = golden_config("qwen3_moe");
        j[c.key] = c.value;
        auto r = ferry::model::read_llama_config(j, "cfg");
        ASSERT_FALSE(r.ok()) << c.key;
        EXPECT_NE(r.error().message.find(c.says), std::string::npos) << r.error().message;
    }
}

TEST(MoeCheckpoint, InconsistentExpertCountIsOneClearError) {
    // config.json says 8 experts; the directory's router has rows for 4.
    const std::string dir =
        edited_dir("mixtral", [](nlohmann::json& j) { j["num_local_experts"] = 8; });
    auto lm = ferry::engine::LoadedModel::load(dir, false);
    ASSERT_FALSE(lm.ok());
    EXPECT_NE(lm.error().message.find("model.layers.0.block_sparse_moe.gate.weight"),
              std::string::npos)
        << lm.error().message;
    EXPECT_NE(lm.error().message.find("[8, 64] was expected"), std::string::npos)
        << lm.error().message;

    // A GGUF whose expert_count disagrees with its stacked experts.
    const std::string path = (fs::path(::testing::TempDir()) / "moe-count.gguf").string();
    ferry::testing::write_f32_gguf(
        ferry::testing::golden_dir() + "/hf_models/qwen3_moe", path,
        [](ferry::gguf::Writer& w) { w.set("qwen3moe.expert_count", ferry::gguf::make_u32(6)); });
    auto g = ferry::engine::LoadedModel::load(path, false);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.error().message.find("blk.0.ffn_gate_inp.weight"), std::string::npos)
        << g.error().message;

    // ... and ones that declare experts without saying how many each token takes, or none.
    for (bool drop : {true, false}) {
        const std::string p2 = (fs::path(::testing::TempDir()) / "moe-used.gguf").string();
        ferry::testing::write_f32_gguf(ferry::testing::golden_dir() + "/hf_models/qwen3_moe", p2,
                                       [drop](ferry::gguf::Writer& w) {
                                           if (drop)
                                               w.remove("qwen3moe.expert_used_count");
                                           else
                                               w.set("qwen3moe.expert_used_count",
                                                     ferry::gguf::make_u32(0));
                                       });
        auto u = ferry::engine::LoadedModel::load(p2, false);
        ASSERT_FALSE(u.ok());
        EXPECT_NE(
            u.error().message.find(drop ? "no qwen3moe.expert_used_count" : "0 experts used of 8"),
            std::string::npos)
            << u.error().message;
    }
}
