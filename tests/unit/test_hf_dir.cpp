// Hugging Face directories: the safetensors reader against valid and every kind of broken file,
// the directory's shards and index, config.json's hyper-parameters, and the default model
// rewritten as a transformers-layout directory (f32 safetensors, q and k back in rotate-half
// order, config.json) giving the GGUF's logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/model_runner.h"
#include "hf/model_dir.h"
#include "hf/safetensors.h"
#include "model/hf_weights.h"
#include "model/llama.h"
#include "quant/dequantize.h"
#include "test_util.h"

namespace ferry::hf {
namespace {

namespace fs = std::filesystem;

// A safetensors file: tensors (name, dtype, shape, bytes) laid out in order.
struct St {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};

// The 8-byte little-endian header length a safetensors file starts with.
std::vector<uint8_t> length_prefix(uint64_t n) {
    std::vector<uint8_t> out;
    out.reserve(64);
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
    return out;
}

std::vector<uint8_t> safetensors_bytes(const std::vector<St>& ts, nlohmann::json extra = {}) {
    nlohmann::json h = extra.is_null() ? nlohmann::json::object() : extra;
    uint64_t at = 0;
    for (const auto& t : ts) {
        h[t.name] = {
            {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes.size()}}};
        at += t.bytes.size();
    }
    const std::string js = h.dump();
    std::vector<uint8_t> out = length_prefix(js.size());
    out.insert(out.end(), js.begin(), js.end());
    for (const auto& t : ts) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
    return out;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

// The header's JSON replaced by `header` (the data after it kept).
std::vector<uint8_t> with_header(const std::string& header, size_t data_bytes) {
    std::vector<uint8_t> out = length_prefix(header.size());
    out.insert(out.end(), header.begin(), header.end());
    out.resize(out.size() + data_bytes);
    return out;
}

std::string parse_error(const std::vector<uint8_t>& b) {
    auto f = SafetensorsFile::parse(b);
    EXPECT_FALSE(f.ok());
    return f.ok() ? std::string() : f.error().message;
}

TEST(Safetensors, ReadsTensorsAndMetadata) {
    const auto b = safetensors_bytes({{"a", "F32", {2, 3}, f32_bytes({1, 2, 3, 4, 5, 6})},
                                      {"b", "BF16", {4}, std::vector<uint8_t>(8, 0)},
                                      {"c", "F8_E4M3", {0}, {}},
                                      {"d", "I64", {1}, std::vector<uint8_t>(8, 7)}},
                                     {{"__metadata__", {{"format", "pt"}}}});
    auto f = SafetensorsFile::parse(b);
    ASSERT_TRUE(f.ok()) << f.error().message;
    ASSERT_EQ((*f)->tensors().size(), 4u);
    const SafeTensor* a = (*f)->tensor("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->type, DType::F32);
    EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a->n_elements, 6);
    float x[6];
    std::memcpy(x, a->data, 24);
    EXPECT_EQ(x[5], 6.0f);
    EXPECT_TRUE((*f)->tensor("b")->known);
    EXPECT_FALSE((*f)->tensor("c")->known);  // parsed, but not a type ferry computes with
    EXPECT_EQ((*f)->tensor("c")->n_bytes, 0u);
    EXPECT_EQ((*f)->metadata().at("format"), "pt");
    EXPECT_EQ((*f)->tensor("zzz"), nullptr);
}

TEST(Safetensors, EveryBrokenFileIsOneClearError) {
    const auto good = safetensors_bytes({{"a", "F32", {2}, f32_bytes({1, 2})}});
    EXPECT_NE(parse_error({1, 2, 3}).find("shorter than its header length"), std::string::npos);
    auto cut = good;
    cut.resize(20);
    EXPECT_NE(parse_error(cut).find("truncated"), std::string::npos);
    auto huge = good;
    huge[6] = 0x7f;
    EXPECT_NE(parse_error(huge).find("refused"), std::string::npos);
    EXPECT_NE(parse_error(with_header("[1, 2]", 0)).find("not a JSON object"), std::string::npos);
    EXPECT_NE(parse_error(with_header("{\"a\": 1", 0)).find("not a JSON object"),
              std::string::npos);
    EXPECT_NE(parse_error(with_header(R"({"a": {"dtype": "F32", "shape": [2]}})", 8))
                  .find("data_offsets"),
              std::string::npos);
    EXPECT_NE(parse_error(
                  with_header(R"({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}})", 8))
                  .find("unknown dtype 'Q4'"),
              std::string::npos);
    EXPECT_NE(
        parse_error(
            with_header(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8))
            .find("spans 8 bytes, not 12"),
        std::string::npos);
    EXPECT_NE(
        parse_error(
            with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 80]}})", 8))
            .find("outside"),
        std::string::npos);
    EXPECT_NE(
        parse_error(
            with_header(R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8))
            .find("not a size"),
        std::string::npos);
    // Overlap, a gap, bytes no tensor claims.
    EXPECT_NE(
        parse_error(with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                          "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                12))
            .find("starts at byte 4"),
        std::string::npos);
    EXPECT_NE(
        parse_error(
            with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12))
            .find("starts at byte 4"),
        std::string::npos);
    EXPECT_NE(
        parse_error(
            with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 12))
            .find("cover 8 of the 12"),
        std::string::npos);
    EXPECT_NE(parse_error(with_header(R"({"__metadata__": {"k": 1}})", 0)).find("not a string"),
              std::string::npos);
    EXPECT_NE(
        parse_error(
            with_header(
                R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 8]}})",
                8))
            .find("overflowing"),
        std::string::npos);
}

void write_file(const fs::path& p, const std::vector<uint8_t>& b) {
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
void write_file(const fs::path& p, const std::string& s) {
    std::ofstream(p) << s;
}

TEST(ModelDir, ShardsIndexAndTheirErrors) {
    const fs::path d = fs::path(::testing::TempDir()) / "ferry_hf_shards";
    fs::remove_all(d);
    fs::create_directories(d);
    write_file(d / "config.json", R"({"model_type": "llama"})");
    write_file(d / "s1.safetensors", safetensors_bytes({{"x", "F32", {1}, f32_bytes({1})}}));
    write_file(d / "s2.safetensors", safetensors_bytes({{"y", "F32", {1}, f32_bytes({2})}}));
    write_file(d / "model.safetensors.index.json",
               R"({"weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})");
    EXPECT_TRUE(is_model_dir(d.string()));
    auto m = ModelDir::open(d.string());
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ((*m)->shards().size(), 2u);
    ASSERT_NE((*m)->tensor("y"), nullptr);
    EXPECT_EQ((*m)->tensors().size(), 2u);
    EXPECT_TRUE((*m)->generation_config().is_null());

    write_file(d / "model.safetensors.index.json",
               R"({"weight_map": {"x": "s1.safetensors", "y": "s3.safetensors"}})");
    auto missing = ModelDir::open(d.string());
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.error().message.find("s3.safetensors"), std::string::npos);
    write_file(d / "model.safetensors.index.json",
               R"({"weight_map": {"x": "s1.safetensors", "z": "s2.safetensors"}})");
    auto absent = ModelDir::open(d.string());
    ASSERT_FALSE(absent.ok());
    EXPECT_NE(absent.error().message.find("'z' is not in s2.safetensors"), std::string::npos);
    write_file(d / "model.safetensors.index.json", R"({"weight_map": {"x": "../s1.safetensors"}})");
    EXPECT_FALSE(ModelDir::open(d.string()).ok());
    write_file(d / "config.json", "{ not json");
    auto bad = ModelDir::open(d.string());
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("config.json: not a JSON object"), std::string::npos);
    fs::remove_all(d);
}

TEST(HfConfig, HyperParametersAndRefusals) {
    nlohmann::json c = {{"model_type", "qwen2"},    {"hidden_size", 896},
                        {"num_hidden_layers", 24},  {"num_attention_heads", 14},
                        {"num_key_value_heads", 2}, {"intermediate_size", 4864},
                        {"vocab_size", 151936},     {"max_position_embeddings", 32768},
                        {"rope_theta", 1000000.0},  {"rms_norm_eps", 1e-6},
                        {"sliding_window", 4096},   {"use_sliding_window", false}};
    auto cfg = model::read_llama_config(c, "c.json");
    ASSERT_TRUE(cfg.ok()) << cfg.error().message;
    EXPECT_EQ(cfg->head_dim, 64);
    EXPECT_EQ(cfg->kv_dim(), 128);
    EXPECT_EQ(cfg->n_ctx_train, 32768);
    EXPECT_EQ(cfg->sliding_window, 0);  // the window is off
    EXPECT_FLOAT_EQ(cfg->rope_theta, 1e6f);
    EXPECT_EQ(cfg->rope_style, kernels::RopeStyle::Neox);
    c["model_type"] = "mistral";
    c.erase("use_sliding_window");
    EXPECT_EQ(model::read_llama_config(c, "c.json")->n_ctx_train, 32768);
    EXPECT_EQ(model::read_llama_config(c, "c.json")->sliding_window, 4096);  // Mistral: all layers
    // Qwen2's layers from max_window_layers on slide: those layers only.
    c["use_sliding_window"] = true;
    c["max_window_layers"] = 20;
    auto mixed = model::read_llama_config(c, "c.json");
    ASSERT_TRUE(mixed.ok()) << mixed.error().message;
    EXPECT_EQ(mixed->sliding_window, 4096);
    EXPECT_EQ(mixed->window(19), 0);
    EXPECT_EQ(mixed->window(20), 4096);
    EXPECT_FALSE(mixed->all_layers_slide());
    c["max_window_layers"] = 24;
    EXPECT_EQ(model::read_llama_config(c, "c.json")->sliding_window, 0);
    c["layer_types"] = std::vector<std::string>(24, "sliding_attention");
    EXPECT_EQ(model::read_llama_config(c, "c.json")->sliding_window, 4096);
    c.erase("layer_types");
    c.erase("use_sliding_window");
    c.erase("max_window_layers");
    c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}};
    auto scaled = model::read_llama_config(c, "c.json");
    ASSERT_FALSE(scaled.ok());
    EXPECT_NE(scaled.error().message.find("'llama3' needs a positive low_freq_factor"),
              std::string::npos)
        << scaled.error().message;
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 32.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
    scaled = model::read_llama_config(c, "c.json");
    ASSERT_TRUE(scaled.ok()) << scaled.error().message;
    EXPECT_EQ(scaled->rope_scaling.type, model::RopeScaling::Type::Llama3);
    EXPECT_EQ(scaled->rope_scaling.original_ctx, 8192);
    c["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
    scaled = model::read_llama_config(c, "c.json");
    ASSERT_TRUE(scaled.ok()) << scaled.error().message;
    EXPECT_EQ(scaled->rope_scaling.type, model::RopeScaling::Type::Linear);
    EXPECT_EQ(scaled->rope_scaling.factor, 4.0);
    c["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
    scaled = model::read_llama_config(c, "c.json");
    ASSERT_FALSE(scaled.ok());
    EXPECT_NE(scaled.error().message.find("rope_scaling 'dynamic' is not supported"),
              std::string::npos);
    c["rope_scaling"] = nullptr;
    // transformers 5 moves the base and the scaling into rope_parameters.
    c.erase("rope_theta");
    EXPECT_FLOAT_EQ(model::read_llama_config(c, "c.json")->rope_theta, 10000.0f);
    c["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "default"}};
    EXPECT_FLOAT_EQ(model::read_llama_config(c, "c.json")->rope_theta, 5e5f);
    c["rope_parameters"] = {
        {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
    scaled = model::read_llama_config(c, "c.json");
    ASSERT_TRUE(scaled.ok()) << scaled.error().message;
    EXPECT_EQ(scaled->rope_scaling.type, model::RopeScaling::Type::Yarn);
    EXPECT_NEAR(model::rope_attention_scale(scaled->rope_scaling), 1 + 0.1 * std::log(4.0), 1e-9);
    c["rope_parameters"]["mscale"] = 1.0;
    scaled = model::read_llama_config(c, "c.json");
    ASSERT_FALSE(scaled.ok());
    EXPECT_NE(scaled.error().message.find("mscale"), std::string::npos);
    c["rope_parameters"] = {{"rope_type", "longrope"}, {"factor", 4.0}};
    scaled = model::read_llama_config(c, "c.json");
    ASSERT_FALSE(scaled.ok());
    EXPECT_NE(scaled.error().message.find("rope_scaling 'longrope'"), std::string::npos);
    c.erase("rope_parameters");
    c["model_type"] = "mamba";
    EXPECT_NE(model::read_llama_config(c, "c.json").error().message.find("'mamba'"),
              std::string::npos);
    c["model_type"] = "llama";
    c["hidden_size"] = "big";
    EXPECT_NE(model::read_llama_config(c, "c.json").error().message.find("hidden_size"),
              std::string::npos);
}

// The default model as transformers would hold it: every tensor dequantized to f32 under its
// transformers name, q and k rows back in rotate-half order (the GGUF converter interleaved
// them for adjacent-pair rotation), and a config.json with the GGUF's hyper-parameters.
fs::path write_default_as_hf_dir() {
    const auto& lm = ferry::testing::default_model();
    const auto& c = lm.model->config();
    const fs::path d = fs::path(::testing::TempDir()) / "ferry_hf_default";
    fs::remove_all(d);
    fs::create_directories(d);
    std::vector<St> ts;
    for (const auto& t : lm.file->tensors()) {
        const std::string hn = model::HfWeights::hf_name(t.name);
        EXPECT_FALSE(hn.empty()) << t.name;
        std::vector<float> v(static_cast<size_t>(t.n_elements));
        EXPECT_TRUE(quant::dequantize_row(t.type, t.data, v.data(), t.n_elements).ok());
        std::vector<int64_t> shape(t.shape.rbegin(), t.shape.rend());
        const bool q = t.name.ends_with("attn_q.weight"), k = t.name.ends_with("attn_k.weight");
        if (q || k) {
            const int heads = q ? c.n_head : c.n_head_kv, hd = c.head_dim;
            const int64_t cols = t.shape[0];
            std::vector<float> u(v.size());
            for (int h = 0; h < heads; ++h)
                for (int a = 0; a < 2; ++a)
                    for (int b = 0; b < hd / 2; ++b)
                        std::memcpy(&u[(size_t(h) * hd + a * hd / 2 + b) * cols],
                                    &v[(size_t(h) * hd + 2 * b + a) * cols], cols * sizeof(float));
            v = std::move(u);
        }
        ts.push_back({hn, "F32", shape, f32_bytes(v)});
    }
    write_file(d / "model.safetensors", safetensors_bytes(ts));
    const nlohmann::json config = {{"model_type", "llama"},
                                   {"hidden_size", c.n_embd},
                                   {"num_hidden_layers", c.n_layer},
                                   {"num_attention_heads", c.n_head},
                                   {"num_key_value_heads", c.n_head_kv},
                                   {"intermediate_size", c.n_ff},
                                   {"vocab_size", c.n_vocab},
                                   {"max_position_embeddings", c.n_ctx_train},
                                   {"rope_theta", c.rope_theta},
                                   {"rms_norm_eps", c.rms_eps},
                                   {"tie_word_embeddings", true}};
    write_file(d / "config.json", config.dump(2));
    return d;
}

TEST(HfDirectory, DefaultModelRewrittenAsTransformersLayoutGivesTheGgufLogits) {
    const auto& lm = ferry::testing::default_model();
    const fs::path d = write_default_as_hf_dir();
    auto dir = ModelDir::open(d.string());
    ASSERT_TRUE(dir.ok()) << dir.error().message;
    auto cfg = model::read_llama_config((*dir)->config(), (d / "config.json").string());
    ASSERT_TRUE(cfg.ok()) << cfg.error().message;
    // Exact float math on both sides: the GGUF's q4_1 weights widened to floats, and their f32
    // copies. What is left is the order of float sums (another kernel, q and k dims permuted).
    auto be = kernels::make_backend({.threads = 2, .activations = kernels::Activations::F32});
    ASSERT_TRUE(be.ok());
    auto weights =
        std::make_shared<model::HfWeights>(std::shared_ptr<const ModelDir>(std::move(*dir)));
    auto hf_model = model::LlamaModel::load(weights, *cfg, **be, {});
    ASSERT_TRUE(hf_model.ok()) << hf_model.error().message;
    EXPECT_EQ((*hf_model)->parameter_count(), lm.model->parameter_count());

    const auto prompt =
        lm.tokenizer->encode("The lighthouse keeper climbed the stairs", true, false);
    auto logits = [&](const model::LlamaModel& m) {
        engine::ModelRunner runner(m, *be, 4, 16);
        const int32_t blocks[] = {0, 1, 2, 3};
        const engine::ModelRunner::Work w{prompt, 0, blocks, 1};
        const auto l = runner.run({&w, 1});
        return std::vector<float>(l.begin(), l.end());
    };
    const auto want = logits(*lm.model), got = logits(**hf_model);
    ASSERT_EQ(want.size(), got.size());
    float max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        max_diff = std::max(max_diff, std::fabs(want[i] - got[i]));
        max_abs = std::max(max_abs, std::fabs(want[i]));
    }
    std::printf("[ hf ] max |logit difference| %.2e of max |logit| %.1f\n", max_diff, max_abs);
    EXPECT_LT(max_diff, 1e-3f * max_abs);
    EXPECT_EQ(std::max_element(want.begin(), want.end()) - want.begin(),
              std::max_element(got.begin(), got.end()) - got.begin());

    // Quantized at load, as --weights q8_0 does: close to the f32 copy, not equal.
    auto q8 = model::LlamaModel::load(weights, *cfg, **be, {false, DType::Q8_0, {}});
    ASSERT_TRUE(q8.ok()) << q8.error().message;
    const auto got8 = logits(**q8);
    float d8 = 0;
    for (size_t i = 0; i < want.size(); ++i) d8 = std::max(d8, std::fabs(want[i] - got8[i]));
    EXPECT_GT(d8, 0.0f);
    EXPECT_LT(d8, 0.05f * max_abs);
    // Rows that do not split into q4_k's 256-element blocks (576) take ferry quantize's (and
    // llama.cpp's) fallback, q5_0, and the load says so (and nothing else: the q5_0 matrices are
    // multiplied as they are); rows of 1536 (ffn_down) stay q4_k.
    auto k_quant = model::LlamaModel::load(weights, *cfg, **be, {false, DType::Q4_K, {}});
    ASSERT_TRUE(k_quant.ok()) << k_quant.error().message;
    const auto& notes = (*k_quant)->load_notes();
    ASSERT_FALSE(notes.empty());
    std::string all;
    for (const auto& n : notes) all += n + "\n";
    EXPECT_NE(all.find("as q5_0 (rows of 576 are not whole 256-element blocks)"), std::string::npos)
        << all;
    EXPECT_EQ(all.find("computed as"), std::string::npos) << all;
    EXPECT_EQ(all.find("rows of 1536"), std::string::npos) << all;
    fs::remove_all(d);
}

}  // namespace
}  // namespace ferry::hf
