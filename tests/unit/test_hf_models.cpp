// Small Hugging Face directories with random weights, built by transformers from a config
// (tests/golden/hf_models, written by scripts/gen-golden-hf-models.py), against transformers'
// own forward pass on them, read two ways: as a directory, and converted to GGUF by
// convert/hf_to_gguf (what `ferry quantize DIR OUT.gguf` writes). The generator script also
// ran llama.cpp on that GGUF and checked its tokens and logits against transformers'.
//
// Tolerance: the weights are bf16, which both sides widen to f32 exactly; what differs is the
// order of float sums (measured: under 6e-6 of a logit, the distance of transformers' f32 from
// its own f64), against logits of magnitude ~4 whose top-1/top-2 gaps are at least 0.06. A
// wrong rotation order, a missing bias or norm, or a wrong rope base moves them by tenths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "calibrate/medusa_training.h"
#include "convert/hf_to_gguf.h"
#include "convert_util.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/loaded_model.h"
#include "gguf/gguf_writer.h"
#include "hf/model_dir.h"
#include "model/llama_config.h"
#include "model/medusa_heads.h"
#include "test_util.h"
#include "tree_test_util.h"

namespace fs = std::filesystem;
using ferry::engine::Generator;
using ferry::engine::LoadedModel;

namespace {

constexpr float kMaxAbs = 1e-4f;

std::string model_dir(const std::string& arch) {
    return ferry::testing::golden_dir() + "/hf_models/" + arch;
}

nlohmann::json golden(const std::string& arch) {
    std::ifstream in(model_dir(arch) + "/golden.json");
    return nlohmann::json::parse(in);
}

std::shared_ptr<ferry::kernels::Backend> f32_backend() {
    auto b = ferry::kernels::make_backend(
        {.threads = 2, .activations = ferry::kernels::Activations::F32});
    if (!b) throw std::runtime_error(b.error().message);
    return std::move(b).value();
}

// The directory written out as ferry quantize --type f32 writes it.
std::string convert_to_gguf(const std::string& arch) {
    const std::string path = (fs::path(::testing::TempDir()) / (arch + "-converted.gguf")).string();
    ferry::testing::write_f32_gguf(model_dir(arch), path);
    return path;
}

// Tokens, last logits and a greedy continuation of every case against transformers'.
void expect_transformers(const LoadedModel& lm, const nlohmann::json& g, const std::string& what) {
    Generator gen(*lm.model, lm.backend, 256);
    ferry::engine::SamplingParams greedy;
    greedy.temperature = 0;
    for (const auto& c : g["cases"]) {
        const auto text = c["text"].get<std::string>();
        const auto ids = c["ids"].get<std::vector<int32_t>>();
        EXPECT_EQ(lm.tokenizer->encode(text, true, true), ids) << what << ": " << text;

        auto logits = gen.logits_for(ids);
        ASSERT_TRUE(logits.ok()) << logits.error().message;
        const auto want = c["last_logits"].get<std::vector<float>>();
        ASSERT_EQ(logits->size(), want.size()) << what;
        float max_diff = 0;
        for (size_t i = 0; i < want.size(); ++i)
            max_diff = std::max(max_diff, std::fabs((*logits)[i] - want[i]));
        EXPECT_LT(max_diff, kMaxAbs) << what << ": " << text;
        std::printf("[ %s ] max |logit - transformers'| %.2e\n", what.c_str(), max_diff);

        std::vector<int32_t> got;
        gen.reset();
        auto st = gen.generate(
            ids, greedy, 12,
            [&](int32_t t) {
                got.push_back(t);
                return true;
            },
            [](int32_t) { return false; });
        ASSERT_TRUE(st.ok()) << st.error().message;
        EXPECT_EQ(got, c["greedy"].get<std::vector<int32_t>>()) << what << ": " << text;
    }
}

class HfModels : public ::testing::TestWithParam<std::string> {};

TEST_P(HfModels, DirectoryAnswersAsTransformers) {
    auto lm = LoadedModel::load(model_dir(GetParam()), false, f32_backend());
    ASSERT_TRUE(lm.ok()) << lm.error().message;
    expect_transformers(*lm, golden(GetParam()), GetParam() + " dir");
}

TEST_P(HfModels, ConvertedGgufAnswersAsTransformers) {
    const std::string path = convert_to_gguf(GetParam());
    auto lm = LoadedModel::load(path, false, f32_backend());
    ASSERT_TRUE(lm.ok()) << lm.error().message;
    ASSERT_TRUE(lm->file);  // read as a GGUF, with the tokenizer from its own metadata
    expect_transformers(*lm, golden(GetParam()), GetParam() + " gguf");

    // The tokenizer as GGUF carries it decodes as the directory's does, and the chat template
    // and end-of-generation token came along.
    auto dir = LoadedModel::load(model_dir(GetParam()), false, f32_backend());
    ASSERT_TRUE(dir.ok()) << dir.error().message;
    const nlohmann::json g = golden(GetParam());  // alive for the loop (C++20 does not extend it)
    for (const auto& c : g["cases"]) {
        auto ids = c["ids"].get<std::vector<int32_t>>();
        // Without the BOS: after one that renders as nothing, llama.cpp (which the GGUF side
        // follows) keeps the prefix space of the next token and transformers' Strip drops it.
        if (!ids.empty() && ids[0] == dir->tokenizer->bos()) ids.erase(ids.begin());
        EXPECT_EQ(lm->tokenizer->decode(ids, false), dir->tokenizer->decode(ids, false));
        EXPECT_EQ(lm->tokenizer->decode(ids, true), dir->tokenizer->decode(ids, true));
    }
    EXPECT_EQ(lm->tokenizer->eos(), dir->tokenizer->eos());
    EXPECT_EQ(lm->tokenizer->bos(), dir->tokenizer->bos());
    EXPECT_EQ(lm->tokenizer->add_bos(), dir->tokenizer->add_bos());
    EXPECT_TRUE(lm->chat_template.has_value());
    EXPECT_EQ(lm->file->get_string("tokenizer.chat_template").value_or(""),
              dir->dir->chat_template().value());
}

INSTANTIATE_TEST_SUITE_P(Architectures, HfModels,
                         ::testing::Values("llama", "llama31", "qwen2", "qwen3", "phi3", "mistral",
                                           "gemma3", "mixtral", "qwen3_moe", "qwen2_moe"),
                         [](const auto& info) { return info.param; });

// What has no GGUF spelling is refused by name, not written as a file that tokenizes wrong.
// The GGUF llama.cpp's own converter (convert_hf_to_gguf.py) wrote from the directory, read as
// a user's file: its names, stacked experts and metadata as llama.cpp writes them.
class HfModelsLlamaCppGguf : public ::testing::TestWithParam<std::string> {};

TEST_P(HfModelsLlamaCppGguf, AnswersAsTransformers) {
    auto lm = LoadedModel::load(model_dir(GetParam()) + "/llama.cpp.gguf", false, f32_backend());
    ASSERT_TRUE(lm.ok()) << lm.error().message;
    ASSERT_TRUE(lm->file);
    expect_transformers(*lm, golden(GetParam()), GetParam() + " llama.cpp's gguf");
}

INSTANTIATE_TEST_SUITE_P(ByteLevel, HfModelsLlamaCppGguf,
                         ::testing::Values("llama", "llama31", "qwen2", "qwen3", "mixtral",
                                           "qwen3_moe", "qwen2_moe", "phi3"),
                         [](const auto& info) { return info.param; });
// From the directory's tokenizer.model, as the converter reads Llama 2's and Mistral's. (Not
// gemma3: the converter writes Gemma 3's fixed layout, which this small model departs from; the
// real Gemma 3 270M, a GGUF that converter wrote, is checked in test_gemma3.cpp.)
INSTANTIATE_TEST_SUITE_P(SentencePiece, HfModelsLlamaCppGguf, ::testing::Values("mistral"),
                         [](const auto& info) { return info.param; });

TEST(HfToGguf, RefusesTokenizersGgufCannotCarry) {
    std::ifstream in(model_dir("qwen2") + "/tokenizer.json");
    nlohmann::json tok = nlohmann::json::parse(in);
    const nlohmann::json config = {{"eos_token", "<|im_end|>"}};
    const int n = static_cast<int>(tok["model"]["vocab"].size());
    {
        ferry::gguf::Writer w;
        ASSERT_TRUE(ferry::convert::write_tokenizer(tok, config, n, w).ok());
        EXPECT_EQ(*w.find("tokenizer.ggml.pre")->as_string(), "qwen2");
        EXPECT_EQ(*w.find("tokenizer.ggml.model")->as_string(), "gpt2");
        // A vocabulary padded past the tokenizer's ids gets placeholders, as llama.cpp's has.
        ferry::gguf::Writer padded;
        ASSERT_TRUE(ferry::convert::write_tokenizer(tok, config, n + 3, padded).ok());
        const auto& items = padded.find("tokenizer.ggml.tokens")->as_array()->items;
        ASSERT_EQ(items.size(), size_t(n + 3));
        EXPECT_EQ(*items.back().as_string(), "[PAD" + std::to_string(n + 2) + "]");
    }
    auto refused = [&](const nlohmann::json& t, int n_vocab, const std::string& needle) {
        ferry::gguf::Writer w;
        const auto s = ferry::convert::write_tokenizer(t, config, n_vocab, w);
        ASSERT_FALSE(s.ok()) << needle;
        EXPECT_NE(s.error().message.find(needle), std::string::npos) << s.error().message;
    };
    auto other = tok;
    other["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
    refused(other, n, "no tokenizer.ggml.pre name");
    refused(tok, n - 1, "outside config.json's vocab_size");
    other = tok;
    other["model"]["type"] = "Unigram";
    refused(other, n, "model 'Unigram'");
    other = tok;
    other["normalizer"] = {{"type", "NFKC"}};
    refused(other, n, "normalizer (NFKC)");
}

// Llama's GGUF rotates adjacent pairs, so q and k rows are interleaved from transformers'
// halves; Qwen2's rotates halves as transformers does, so nothing moves.
TEST(HfToGguf, PermutesQueryAndKeyRowsForLlamaOnly) {
    for (const std::string arch : {"llama", "qwen2"}) {
        auto dir = ferry::hf::ModelDir::open(model_dir(arch));
        ASSERT_TRUE(dir.ok());
        auto cfg = ferry::model::read_llama_config((*dir)->config(), arch);
        ASSERT_TRUE(cfg.ok());
        auto sources = ferry::convert::source_tensors(**dir, *cfg);
        ASSERT_TRUE(sources.ok()) << sources.error().message;
        for (const auto& t : *sources) {
            const bool qk = t.name.ends_with("attn_q.weight") || t.name.ends_with("attn_k.weight");
            if (!qk || arch == "qwen2") {
                EXPECT_TRUE(t.row_order.empty()) << arch << " " << t.name;
                continue;
            }
            const int hd = cfg->head_dim;
            ASSERT_EQ(t.row_order.size(), size_t(t.n_rows()));
            EXPECT_EQ(t.row_order[0], 0);
            EXPECT_EQ(t.row_order[1], hd / 2);  // the first pair: x0 and x[hd/2]
            EXPECT_EQ(t.row_order[2], 1);
            EXPECT_EQ(t.row_order[size_t(hd)], hd);  // the second head starts in place
            auto sorted = t.row_order;
            std::sort(sorted.begin(), sorted.end());
            for (size_t i = 0; i < sorted.size(); ++i) EXPECT_EQ(sorted[i], int32_t(i));
        }
    }
}

}  // namespace

// Batching changes nothing on the families whose attention differs by layer, nor on those whose
// tokens each take their own experts (a batch's tokens gathered per expert): 16 mixed requests
// at once (chunked prefill, prompts far longer than gemma3's and phi3's windows of 8, shared
// prefixes for the prefix cache) give each the tokens it gets alone.
class HfModelsEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(HfModelsEngine, ConcurrentGreedyEqualsOneAtATime) {
    auto lm = LoadedModel::load(model_dir(GetParam()), false, f32_backend());
    ASSERT_TRUE(lm.ok()) << lm.error().message;
    const nlohmann::json g = golden(GetParam());
    std::vector<std::vector<int32_t>> prompts;
    std::vector<ferry::engine::RequestParams> params;
    for (int i = 0; i < 16; ++i) {
        const auto& c = g["cases"][static_cast<size_t>(i % 4)];
        std::string text = c["text"].get<std::string>();
        for (int r = 0; r < i / 4; ++r) {
            text += ' ';  // (GCC 12 warns falsely on " " + string here)
            text += g["cases"][static_cast<size_t>(r)]["text"].get<std::string>();
        }
        prompts.push_back(lm->tokenizer->encode(text, true, true));
        ferry::engine::RequestParams p;
        p.sampling.temperature = 0;
        p.max_tokens = 3 + i % 7;
        p.ignore_eos = true;  // random weights pick the end token now and then
        params.push_back(p);
    }
    auto run = [&](int max_seqs, bool prefix_cache, std::vector<std::vector<int32_t>>& out) {
        ferry::engine::EngineConfig cfg;
        cfg.max_model_len = 256;
        cfg.kv_cache_memory = 8ll << 20;
        cfg.max_num_seqs = max_seqs;
        cfg.max_num_batched_tokens = 24;  // prompts of up to ~60 tokens prefill in chunks
        cfg.prefix_cache = prefix_cache;
        auto e = ferry::engine::Engine::create(*lm, cfg);
        ASSERT_TRUE(e.ok()) << e.error().message;
        out.assign(prompts.size(), {});
        for (size_t i = 0; i < prompts.size(); ++i) {
            auto id = (*e)->add_request(prompts[i], params[i],
                                        [&out, i](const ferry::engine::TokenEvent& ev) {
                                            if (ev.token >= 0) out[i].push_back(ev.token);
                                        });
            ASSERT_TRUE(id.ok()) << id.error().message;
            if (max_seqs == 1)
                while ((*e)->has_work()) (*e)->step();
        }
        while ((*e)->has_work()) (*e)->step();
        EXPECT_EQ((*e)->metrics().kv_blocks_used, 0);
    };
    std::vector<std::vector<int32_t>> together, alone;
    run(16, true, together);
    run(1, false, alone);
    size_t past_window = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        past_window += prompts[i].size() > 8;
        EXPECT_EQ(together[i].size(), static_cast<size_t>(params[i].max_tokens)) << i;
        EXPECT_EQ(together[i], alone[i]) << GetParam() << " request " << i;
    }
    EXPECT_GE(past_window, 15u);  // all but "Good morning" alone (past gemma3's and phi3's 8)
}

INSTANTIATE_TEST_SUITE_P(SlidingWindows, HfModelsEngine, ::testing::Values("gemma3", "phi3"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Dense, HfModelsEngine,
                         ::testing::Values("llama", "llama31", "qwen2", "qwen3", "mistral"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(MixturesOfExperts, HfModelsEngine,
                         ::testing::Values("mixtral", "qwen3_moe", "qwen2_moe"),
                         [](const auto& info) { return info.param; });

namespace {

// Every golden case's text, one after the other: a prompt far past the test models' windows.
std::vector<int32_t> every_case_text(const LoadedModel& lm, const std::string& name) {
    const nlohmann::json g = golden(name);
    std::string text;
    for (const auto& c : g["cases"]) text += c["text"].get<std::string>() + " ";
    return lm.tokenizer->encode(text, true, true);
}

// The Generator's greedy tokens: one sequence in one flat cache that keeps every position.
void greedy_one_flat_cache(const LoadedModel& lm, const std::vector<int32_t>& prompt, int n_gen,
                           std::vector<int32_t>& out) {
    Generator gen(*lm.model, lm.backend, 256);
    ferry::engine::SamplingParams greedy;
    greedy.temperature = 0;
    ASSERT_TRUE(gen.generate(
                       prompt, greedy, n_gen,
                       [&](int32_t t) {
                           out.push_back(t);
                           return true;
                       },
                       [](int32_t) { return false; })
                    .ok());
}

}  // namespace

// A model whose every layer slides gives back the blocks that left the window as it runs:
// phi3's window of 8 over 4-slot blocks, a ~60-token prompt prefilled in chunks of 16 and 24
// generated tokens hold a handful of blocks at a time instead of all 21, every token is the one
// the Generator (which keeps every block) picks, and a pool smaller than the sequence does not
// cut the context.
TEST(HfModelsWindow, AllSlidingLayersGiveBackBlocksOutOfTheWindow) {
    auto lm = LoadedModel::load(model_dir("phi3"), false, f32_backend());
    ASSERT_TRUE(lm.ok()) << lm.error().message;
    const auto prompt = every_case_text(*lm, "phi3");
    ASSERT_GE(prompt.size(), 50u);
    const int n_gen = 24;
    std::vector<int32_t> want;
    ASSERT_NO_FATAL_FAILURE(greedy_one_flat_cache(*lm, prompt, n_gen, want));

    // With and without the prefix cache, and in a pool of 12 blocks: 48 slots, fewer than the
    // sequence's 84 tokens but more than its window and a chunk, so the context is not cut.
    for (int run = 0; run < 3; ++run) {
        const bool prefix_cache = run != 1;
        ferry::engine::EngineConfig cfg;
        cfg.max_model_len = 256;
        cfg.kv_cache_memory = 8ll << 20;
        cfg.block_size = 4;
        cfg.max_num_batched_tokens = 16;
        cfg.prefix_cache = prefix_cache;
        if (run == 2) {
            auto probe = ferry::engine::Engine::create(*lm, cfg);
            ASSERT_TRUE(probe.ok()) << probe.error().message;
            cfg.kv_cache_memory = 12 * static_cast<int64_t>((*probe)->kv_bytes_per_block());
        }
        auto e = ferry::engine::Engine::create(*lm, cfg);
        ASSERT_TRUE(e.ok()) << e.error().message;
        if (run == 2) {
            EXPECT_EQ((*e)->metrics().kv_blocks_total, 12);
        }
        EXPECT_EQ((*e)->context_before_kv_cap(), 0) << "run " << run;
        ferry::engine::RequestParams p;
        p.sampling.temperature = 0;
        p.max_tokens = n_gen;
        p.ignore_eos = true;
        std::vector<int32_t> got;
        ASSERT_TRUE((*e)->add_request(prompt, p,
                                      [&](const ferry::engine::TokenEvent& ev) {
                                          if (ev.token >= 0) got.push_back(ev.token);
                                      })
                        .ok());
        int64_t most = 0;
        while ((*e)->has_work()) {
            (*e)->step();
            most = std::max(most, (*e)->metrics().kv_blocks_used);
        }
        EXPECT_EQ(got, want) << "run " << run;
        // The window (8 positions, 2-3 blocks) plus a chunk of 16 (4-5 blocks).
        EXPECT_LE(most, 8) << "run " << run;
        const int64_t all = (static_cast<int64_t>(prompt.size()) + n_gen + 3) / 4;
        EXPECT_GE((*e)->metrics().kv_blocks_dropped, static_cast<uint64_t>(all - 8));
        EXPECT_EQ((*e)->metrics().kv_blocks_used, 0);
    }
}

// Gemma 3's sliding layers keep their blocks in a pool of their own, sized for windows, while
// its global layer keeps the whole context: gemma3's 3 sliding layers of 4 (window 8, 4-slot
// blocks) hold a handful of window blocks at a time, every token is the one the Generator (one
// flat cache) picks, with and without the window pool and the prefix cache, and a repeated
// prompt longer than the window is found in the cache (its window's blocks included). At the
// same memory the pool leaves the global layer room for about 4x the context.
TEST(HfModelsWindow, HybridModelKeepsItsSlidingLayersWindowsInTheirOwnPool) {
    auto lm = LoadedModel::load(model_dir("gemma3"), false, f32_backend());
    ASSERT_TRUE(lm.ok()) << lm.error().message;
    const auto prompt = every_case_text(*lm, "gemma3");
    ASSERT_GE(prompt.size(), 50u);
    const int n_gen = 24;
    std::vector<int32_t> want;
    ASSERT_NO_FATAL_FAILURE(greedy_one_flat_cache(*lm, prompt, n_gen, want));

    ferry::engine::EngineConfig cfg;
    cfg.max_model_len = 256;
    cfg.block_size = 4;
    cfg.max_num_seqs = 4;
    cfg.max_num_batched_tokens = 16;
    cfg.kv_cache_memory = 1 << 20;
    int64_t context_with = 0, context_without = 0;
    for (int run = 0; run < 3; ++run) {
        cfg.kv_window_pool = run != 1;
        cfg.prefix_cache = run != 2;
        auto e = ferry::engine::Engine::create(*lm, cfg);
        ASSERT_TRUE(e.ok()) << e.error().message;
        const auto m0 = (*e)->metrics();
        if (run == 1) {
            EXPECT_EQ(m0.kv_window_blocks_total, 0);
            context_without = m0.kv_blocks_total;
        } else {
            // 4 seats of a window (2 blocks) and two partial blocks each, and a chunk.
            EXPECT_EQ(m0.kv_window_blocks_total, 4 * (2 + 2) + 4);
            context_with = m0.kv_blocks_total;
        }
        ferry::engine::RequestParams p;
        p.sampling.temperature = 0;
        p.max_tokens = n_gen;
        p.ignore_eos = true;
        for (int rep = 0; rep < 2; ++rep) {
            std::vector<int32_t> got;
            ferry::engine::RequestId id = 0;
            auto added = (*e)->add_request(prompt, p, [&](const ferry::engine::TokenEvent& ev) {
                if (ev.token >= 0) got.push_back(ev.token);
            });
            ASSERT_TRUE(added.ok());
            id = *added;
            int64_t most_window = 0, most = 0;
            while ((*e)->has_work()) {
                (*e)->step();
                most_window = std::max(most_window, (*e)->metrics().kv_window_blocks_used);
                most = std::max(most, (*e)->metrics().kv_blocks_used);
            }
            EXPECT_EQ(got, want) << "run " << run << " rep " << rep;
            const int64_t all = (static_cast<int64_t>(prompt.size()) + n_gen + 3) / 4;
            EXPECT_GE(most, all - 1) << "run " << run;  // the global layer keeps everything
            if (run != 1) {
                EXPECT_LE(most_window, 8) << "run " << run;  // window (2-3) and a chunk (4-5)
            }
            const auto m = (*e)->metrics();
            EXPECT_EQ(m.kv_blocks_used, 0);
            EXPECT_EQ(m.kv_window_blocks_used, 0);
            if (rep == 1 && run == 0) {  // the second time, the prefix cache has it
                EXPECT_GE(m.prefix_hit_tokens, prompt.size() - 8) << id;
            }
            if (rep == 0 && run != 1) {  // what left the window went back as it ran
                EXPECT_GE(m.kv_blocks_dropped, static_cast<uint64_t>(all - 8)) << "run " << run;
            }
        }
    }
    // Per block of context: 1 layer's keys and values instead of 4, less the window pool.
    EXPECT_GT(context_with, 3 * context_without) << context_with << " vs " << context_without;
}

// Tree attention on a hybrid cache: a tree's tokens sit in slots past their positions, so the
// sliding layers' windows (8 positions here, the prefix longer) count from each token's
// position, not its slot, and an accepted branch moves in both pools.
TEST(HfModelsWindow, TreeAttentionOnAHybridCacheIsEachBranchsChain) {
    auto lm = LoadedModel::load(model_dir("gemma3"), false, f32_backend());
    ASSERT_TRUE(lm.ok()) << lm.error().message;
    ASSERT_GT(lm->model->config().sliding_window, 0);
    auto prompt = every_case_text(*lm, "gemma3");
    prompt.resize(21);
    ferry::testing::expect_tree_is_its_chains(*lm->model, lm->backend, prompt, 1);
    // A tree as deep as the window would hide ancestors behind it: refused by the kernel, and
    // cut to its leading chain by the engine and the generator (fit_tree_to_window).
    ferry::engine::Draft deep;
    for (int i = 0; i < 9; ++i) {
        deep.tokens.push_back(5 + i);
        deep.parent.push_back(i - 1);
    }
    deep.tokens.push_back(3);
    deep.parent.push_back(-1);
    std::vector<int32_t> chunk{7};
    chunk.insert(chunk.end(), deep.tokens.begin(), deep.tokens.end());
    const auto masks = ferry::engine::tree_masks(deep);
    std::vector<int32_t> blocks(16);
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int32_t>(i);
    ferry::engine::ModelRunner r(*lm->model, lm->backend, 16, 4);
    ferry::engine::ModelRunner::Work pre{prompt, 0, blocks, 0};
    r.run({&pre, 1});
    ferry::engine::ModelRunner::Work w{chunk, static_cast<int64_t>(prompt.size()), blocks,
                                       static_cast<int>(chunk.size())};
    w.tree = masks;
    EXPECT_THROW(r.run({&w, 1}), std::invalid_argument);
    ASSERT_EQ(lm->model->config().smallest_window(), 8);
    ferry::engine::fit_tree_to_window(deep, 8);
    EXPECT_FALSE(deep.is_tree());
    EXPECT_EQ(deep.tokens.size(), 9u);
}
