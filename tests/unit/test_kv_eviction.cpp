// KV eviction (engine/kv_eviction.h): which blocks a table keeps and gives back, that moving
// keys under RoPE equals computing them at the new position, that the token after an eviction
// sees exactly the moved sinks and the window (against a cache built by hand), and that
// sequences run past the model's context and give every block back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/block_manager.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/model_runner.h"
#include "engine_test_util.h"
#include "eval/evaluator.h"
#include "eval/stream_eval.h"

namespace ferry {
namespace {

using engine::BlockManager;
using engine::BlockTable;

std::vector<int32_t> toks(int n, int32_t base = 100) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(base + i);
    return t;
}

TEST(KvEvictionBlocks, KeepsTheSinksAndTheNewestBlocksAndGivesBackTheRest) {
    BlockManager bm(32, 16, true);
    BlockTable t;
    std::vector<engine::BlockCopy> copies;
    std::vector<engine::KeyMove> moves;
    ASSERT_TRUE(bm.allocate(t, 0, 150, copies));  // 9 full blocks and a partial one
    const std::vector<int32_t> orig = t.blocks;
    const auto tokens = toks(150);
    bm.register_full(t, tokens, 150);
    ASSERT_EQ(t.hashes.size(), 9u);

    EXPECT_EQ(bm.evict(t, 150, 200, 1, copies, moves), 0);  // under budget: nothing
    EXPECT_TRUE(copies.empty() && moves.empty());

    // 54 over a budget of 96: the four oldest window blocks go.
    ASSERT_EQ(bm.evict(t, 150, 96, 1, copies, moves), 64);
    ASSERT_EQ(t.blocks.size(), 6u);
    EXPECT_EQ(t.sink_sources, std::vector<int32_t>{orig[0]});
    EXPECT_NE(t.blocks[0], orig[0]);  // the sink's private copy
    EXPECT_EQ(std::vector<int32_t>(t.blocks.begin() + 1, t.blocks.end()),
              std::vector<int32_t>(orig.begin() + 5, orig.end()));
    EXPECT_EQ(t.evicted, 64);
    ASSERT_EQ(copies.size(), 1u);
    EXPECT_EQ(copies[0].src, orig[0]);
    EXPECT_EQ(copies[0].dst, t.blocks[0]);
    ASSERT_EQ(moves.size(), 1u);
    EXPECT_EQ(moves[0].block, t.blocks[0]);
    EXPECT_EQ(moves[0].delta, 64);
    EXPECT_TRUE(t.hashes.empty());
    // Held: the table's six and the sink's original; the four evicted stay cached (registered,
    // computed with their whole prefix) for a later request with the same start.
    EXPECT_EQ(bm.pool().num_used(), 7);
    EXPECT_EQ(bm.pool().num_cached(), 4);
    EXPECT_TRUE(bm.pool().consistent());

    // What the table computes from now on saw part of its prefix only: never registered.
    const int64_t cached = bm.pool().num_cached();
    ASSERT_TRUE(bm.allocate(t, 86, 86 + 40, copies));
    bm.register_full(t, tokens, 150);
    EXPECT_TRUE(t.hashes.empty());

    // Later evictions reuse the private copy and turn it by everything evicted so far, from
    // the original again.
    copies.clear();
    moves.clear();
    const int32_t sink_copy = t.blocks[0];
    ASSERT_EQ(bm.evict(t, 126, 96, 1, copies, moves), 32);
    EXPECT_EQ(t.blocks[0], sink_copy);
    EXPECT_EQ(t.evicted, 96);
    ASSERT_EQ(moves.size(), 1u);
    EXPECT_EQ(moves[0].delta, 96);
    EXPECT_EQ(copies[0].src, orig[0]);
    EXPECT_EQ(bm.pool().num_cached(), cached + 2);

    bm.release(t);
    EXPECT_EQ(bm.pool().num_used(), 0);
    EXPECT_TRUE(t.sink_sources.empty());
    EXPECT_EQ(t.evicted, 0);
    EXPECT_TRUE(bm.pool().consistent());
}

TEST(KvEvictionBlocks, SiblingsMoveTheirOwnSinkCopies) {
    BlockManager bm(32, 16, false);
    BlockTable a, b;
    std::vector<engine::BlockCopy> copies;
    std::vector<engine::KeyMove> moves;
    ASSERT_TRUE(bm.allocate(a, 0, 128, copies));
    ASSERT_EQ(bm.evict(a, 128, 80, 1, copies, moves), 48);
    bm.share(a, b);  // a fork after the first eviction shares the sink copy
    const int32_t shared = a.blocks[0];
    ASSERT_TRUE(bm.allocate(a, 80, 96, copies));  // a runs 16 more tokens
    copies.clear();
    moves.clear();
    ASSERT_EQ(bm.evict(a, 96, 64, 1, copies, moves), 32);
    EXPECT_NE(a.blocks[0], shared);  // a takes a copy of its own
    EXPECT_EQ(b.blocks[0], shared);  // b's is untouched
    EXPECT_EQ(b.evicted, 48);
    EXPECT_EQ(moves[0].block, a.blocks[0]);
    EXPECT_EQ(moves[0].delta, 80);
    bm.release(a);
    bm.release(b);
    EXPECT_EQ(bm.pool().num_used(), 0);
    EXPECT_TRUE(bm.pool().consistent());
}

TEST(KvEvictionBlocks, WithoutSinksItIsAPlainWindow) {
    BlockManager bm(32, 16, false);
    BlockTable t;
    std::vector<engine::BlockCopy> copies;
    std::vector<engine::KeyMove> moves;
    ASSERT_TRUE(bm.allocate(t, 0, 150, copies));
    const std::vector<int32_t> orig = t.blocks;
    ASSERT_EQ(bm.evict(t, 150, 96, 0, copies, moves), 64);
    EXPECT_EQ(t.blocks, std::vector<int32_t>(orig.begin() + 4, orig.end()));
    EXPECT_TRUE(t.sink_sources.empty() && copies.empty() && moves.empty());
    bm.release(t);
    EXPECT_EQ(bm.pool().num_used(), 0);
    EXPECT_TRUE(bm.pool().consistent());
}

TEST(KvEvictionBlocks, WaitsWhenTheSinksCopyHasNoBlock) {
    // Every block held, and the blocks eviction would give back shared with a sibling: no
    // block for the sink's copy, so nothing is evicted yet.
    BlockManager bm(8, 16, false);
    BlockTable a, b;
    std::vector<engine::BlockCopy> copies;
    std::vector<engine::KeyMove> moves;
    ASSERT_TRUE(bm.allocate(a, 0, 128, copies));
    bm.share(a, b);
    EXPECT_EQ(bm.num_free(), 0);
    EXPECT_EQ(bm.evict(a, 128, 64, 1, copies, moves), 0);
    EXPECT_EQ(a.blocks.size(), 8u);
    EXPECT_TRUE(copies.empty() && moves.empty());
    bm.release(a);
    bm.release(b);
    EXPECT_EQ(bm.pool().num_used(), 0);
}

// Keys computed at positions p, then moved by d, equal the same tokens' keys computed at
// p + d (rope_offset): in the first layer up to the rotation's rounding (its values are equal,
// bit for bit), in later ones up to what computing at other positions rounds differently.
void expect_moved_keys_match(const engine::LoadedModel& lm, quant::KvDType dtype, float tol) {
    engine::ModelRunner runner(*lm.model, testing::cpu_backend(2), 4, 16, kv::KvFormat{dtype, {}});
    const auto t = toks(16, 300);
    const std::vector<int32_t> b0 = {0}, b1 = {1};
    const int64_t d = 1000;
    const engine::ModelRunner::Work here{t, 0, b0, 0, 0}, there{t, 0, b1, 0, d};
    runner.run({&here, 1});
    runner.run({&there, 1});
    lm.model->move_keys(runner.backend(), runner.kv().view(), 0, d);
    const int kv_dim = runner.kv().kv_dim();
    std::vector<float> k0(kv_dim), v0(kv_dim), k1(kv_dim), v1(kv_dim);
    for (int l = 0; l < runner.kv().n_layer(); ++l) {
        float worst = 0, scale = 0;
        for (int s = 0; s < 16; ++s) {
            runner.kv().read(l, 0, s, k0.data(), v0.data());
            runner.kv().read(l, 1, s, k1.data(), v1.data());
            for (int i = 0; i < kv_dim; ++i) {
                worst = std::max(worst, std::abs(k0[i] - k1[i]));
                scale = std::max(scale, std::abs(k1[i]));
                if (l == 0) {
                    ASSERT_EQ(v0[i], v1[i]);
                }
            }
        }
        EXPECT_GT(scale, 0.1f);
        EXPECT_LT(worst, (l == 0 ? tol : 1e-2f) * scale)
            << quant::kv_dtype_name(dtype) << " layer " << l << " worst " << worst;
    }
}

TEST(KvEvictionKeys, MovedKeysEqualKeysComputedThere) {
    expect_moved_keys_match(testing::default_model(), quant::KvDType::F32, 2e-5f);
    expect_moved_keys_match(testing::default_model(), quant::KvDType::F16, 2e-3f);
    // Qwen3: per-head q/k norms before the rotation.
    auto qwen3 = engine::LoadedModel::load(testing::golden_dir() + "/hf_models/qwen3", false,
                                           testing::cpu_backend(2));
    ASSERT_TRUE(qwen3.ok()) << qwen3.error().message;
    expect_moved_keys_match(*qwen3, quant::KvDType::F32, 2e-5f);
}

TEST(KvEvictionKeys, Int8KeysAreRefused) {
    const auto& lm = testing::default_model();
    engine::ModelRunner runner(
        *lm.model, testing::cpu_backend(2), 2, 16,
        kv::KvFormat{quant::KvDType::Int8,
                     std::vector<float>(static_cast<size_t>(lm.model->config().n_layer *
                                                            lm.model->config().kv_dim()),
                                        0.05f)});
    EXPECT_THROW(lm.model->move_keys(runner.backend(), runner.kv().view(), 0, 16),
                 std::invalid_argument);
}

std::vector<int32_t> text_tokens(int n) {
    const auto& tok = *testing::model().tokenizer;
    std::string text;
    for (const char* s : {"The lighthouse keeper climbed the stairs every evening at dusk, ",
                          "counting the steps and listening to the sea below. ",
                          "Ships passed in the night and the lamp turned slowly. "})
        text += s;
    std::vector<int32_t> t = tok.encode(text, true, false);
    while (static_cast<int>(t.size()) < n) {
        const auto more = tok.encode(text, false, false);
        t.insert(t.end(), more.begin(), more.end());
    }
    t.resize(static_cast<size_t>(n));
    return t;
}

engine::EngineConfig eviction_config(int budget) {
    engine::EngineConfig c = testing::small_config();
    c.kv_eviction.kind = engine::KvEvictionKind::Streaming;
    c.kv_eviction.budget = budget;
    c.kv_eviction.sink_tokens = 4;
    return c;
}

// log-softmax of one row at one token, in double.
double logprob_at(std::span<const float> row, int32_t tok) {
    double mx = row[0];
    for (float x : row) mx = std::max(mx, static_cast<double>(x));
    double sum = 0;
    for (float x : row) sum += std::exp(x - mx);
    return row[static_cast<size_t>(tok)] - mx - std::log(sum);
}

TEST(KvEvictionEngine, TheTokenAfterAnEvictionSeesTheMovedSinksAndTheWindow) {
    // A 150-token prompt in one chunk, then a decode step that finds 150 > 96 cached: the
    // four oldest window blocks (positions 16..79) go, the sink block is moved up by 64.
    const auto prompt = text_tokens(150);
    auto e = testing::make_engine(eviction_config(96));
    engine::RequestParams p = testing::greedy(2);
    p.top_logprobs = 0;
    std::vector<int32_t> got;
    std::vector<float> lps;
    ASSERT_TRUE(e->add_request(prompt, p, [&](const engine::TokenEvent& ev) {
                     if (ev.token < 0) return;
                     got.push_back(ev.token);
                     lps.push_back(ev.logprob);
                 }).ok());
    while (e->has_work()) e->step();
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(e->metrics().kv_evicted_tokens, 64u);
    testing::expect_all_free(*e);

    // The same cache built by hand: the whole prompt in blocks 0..9, the sink block copied to
    // 10 and moved by 64, then the first token at cache position 150 - 64 = 86.
    const auto& lm = testing::default_model();
    engine::ModelRunner r(*lm.model, testing::cpu_backend(2), 12, 16);
    const std::vector<int32_t> all = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    const engine::ModelRunner::Work pre{prompt, 0, all, 1, 0};
    const auto first = r.run({&pre, 1});
    const auto n_vocab = static_cast<size_t>(r.n_vocab());
    const int32_t t1 = static_cast<int32_t>(
        std::max_element(first.begin(), first.begin() + n_vocab) - first.begin());
    ASSERT_EQ(t1, got[0]);
    const std::pair<int32_t, int32_t> copy{0, 10};
    r.kv().copy_blocks({&copy, 1});
    lm.model->move_keys(r.backend(), r.kv().view(), 10, 64);
    const std::vector<int32_t> kept = {10, 5, 6, 7, 8, 9};
    const std::vector<int32_t> next = {t1};
    const engine::ModelRunner::Work dec{next, 86, kept, 1, 64};
    const auto row = r.run({&dec, 1});
    const std::vector<float> moved(row.begin(), row.begin() + n_vocab);
    const int32_t t2 =
        static_cast<int32_t>(std::max_element(moved.begin(), moved.end()) - moved.begin());
    EXPECT_EQ(t2, got[1]);
    EXPECT_NEAR(logprob_at(moved, got[1]), lps[1], 1e-4);

    // Had the sink not been moved (left at positions 0..15), the logits would differ: the
    // move is what the engine ran.
    const std::vector<int32_t> unmoved = {0, 5, 6, 7, 8, 9};
    const engine::ModelRunner::Work dec0{next, 86, unmoved, 1, 64};
    const auto row0 = r.run({&dec0, 1});
    float diff = 0;
    for (size_t i = 0; i < n_vocab; ++i) diff = std::max(diff, std::abs(row0[i] - moved[i]));
    EXPECT_GT(diff, 1e-3f);
}

TEST(KvEvictionEngine, RunsPastTheContextInBoundedMemoryAndGivesEveryBlockBack) {
    // A 256-token context, a 96-token budget, 64-token chunks: prompts longer than the context
    // and 300 generated tokens each, two of them parallel samples of one prompt.
    engine::EngineConfig c = eviction_config(96);
    c.max_model_len = 256;
    c.max_num_batched_tokens = 64;
    auto e = testing::make_engine(c);
    const auto long_prompt = text_tokens(300);
    engine::RequestParams two = testing::greedy(300);
    two.n = 2;
    two.sampling.temperature = 0.8f;
    two.sampling.seed = 7;
    two.sampling.has_seed = true;
    std::vector<std::vector<int32_t>> prompts = {long_prompt, text_tokens(40)};
    auto& eng = *e;
    std::vector<testing::Collected> out(2);
    for (size_t i = 0; i < 2; ++i)
        ASSERT_TRUE(eng.add_request(prompts[i], i == 0 ? two : testing::greedy(300),
                                    [&out, i](const engine::TokenEvent& ev) {
                                        if (ev.token >= 0)
                                            out[i].tokens[ev.index].push_back(ev.token);
                                        if (ev.finished) out[i].reason[ev.index] = ev.finish_reason;
                                    })
                        .ok());
    int64_t peak = 0;
    while (eng.has_work()) {
        eng.step();
        peak = std::max(peak, eng.metrics().kv_blocks_used);
    }
    for (int i : {0, 1}) {
        EXPECT_EQ(out[0].tokens[i].size(), 300u);
        EXPECT_EQ(out[0].reason[i], engine::FinishReason::Length);
    }
    EXPECT_EQ(out[1].tokens[0].size(), 300u);
    EXPECT_GT(eng.metrics().kv_evicted_tokens, 600u);
    // Per sequence at most the budget, a step's 64 tokens, a partial block, the sinks' copy and
    // original: (96 + 64) / 16 + 1 + 2 = 13 blocks; three sequences.
    EXPECT_LE(peak, 3 * 13);
    testing::expect_all_free(eng);
}

TEST(KvEvictionEngine, UnderTheBudgetNothingChanges) {
    const auto prompts = testing::mixed_prompts(6, 3);
    std::vector<engine::RequestParams> params(prompts.size(), testing::greedy(24));
    auto plain = testing::make_engine(testing::small_config());
    auto evicting = testing::make_engine(eviction_config(200));
    const auto a = testing::run_all(*plain, prompts, params);
    const auto b = testing::run_all(*evicting, prompts, params);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(a[i].tokens.at(0), b[i].tokens.at(0));
    EXPECT_EQ(evicting->metrics().kv_evicted_tokens, 0u);
}

TEST(KvEvictionEngine, RefusesWhatItCannotServe) {
    const auto refused = [](engine::EngineConfig c, const char* needle) {
        auto e = engine::Engine::create(testing::model(), c);
        ASSERT_FALSE(e.ok()) << needle;
        EXPECT_NE(e.error().message.find(needle), std::string::npos) << e.error().message;
    };
    engine::EngineConfig c = eviction_config(96);
    c.kv_dtype = quant::KvDType::Int8;
    refused(c, "int8");
    c = eviction_config(96);
    c.kv_layout = engine::EngineConfig::KvLayout::Contiguous;
    refused(c, "paged");
    refused(eviction_config(40), "too small");
    c = eviction_config(400);  // 400 + a step's 256 > the 512-token context
    refused(c, "exceed");
    auto gemma = engine::LoadedModel::load(testing::golden_dir() + "/hf_models/gemma3", false,
                                           testing::cpu_backend(2));
    ASSERT_TRUE(gemma.ok());
    auto g = engine::Engine::create(*gemma, eviction_config(96));
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.error().message.find("sliding-window"), std::string::npos);
}

TEST(StreamEval, TheWholeCacheScoresAsOneWindow) {
    // Through the engine in chunks of 48, every token sees the whole text before it: the same
    // perplexity the windowed evaluator gives with one window over the text.
    const auto t = text_tokens(200);
    engine::EngineConfig c = testing::small_config();
    c.max_num_batched_tokens = 48;
    auto s = eval::evaluate_stream(testing::model(), t, c);
    ASSERT_TRUE(s.ok()) << s.error().message;
    eval::EvalOptions o;
    o.ctx = 256;
    o.backend = testing::cpu_backend(2);
    auto w = eval::evaluate(*testing::model().model, nullptr, t, o);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(s->n_scored, w->n_scored);
    EXPECT_NEAR(s->nll, w->nll, 1e-4);
    EXPECT_EQ(s->evicted_tokens, 0u);
    // With eviction at 64 tokens the text is scored with less context: it costs something,
    // and holds fewer blocks.
    engine::EngineConfig ec = eviction_config(64);
    ec.max_num_batched_tokens = 48;
    auto ev = eval::evaluate_stream(testing::model(), t, ec);
    ASSERT_TRUE(ev.ok()) << ev.error().message;
    EXPECT_GT(ev->evicted_tokens, 0u);
    EXPECT_NE(ev->nll, s->nll);
    EXPECT_LT(ev->peak_kv_blocks, s->peak_kv_blocks);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST(KvEvictionGenerator, SingleStreamEvictsAsTheEngineDoes) {
    // The same blocks, budget and eviction points (a prompt in one chunk, then one token a
    // step): `ferry run`'s stream and the serving engine give the same greedy tokens, far past
    // the budget.
    const auto prompt = text_tokens(100);
    engine::KvEvictionConfig ev;
    ev.kind = engine::KvEvictionKind::Streaming;
    ev.budget = 96;
    ASSERT_TRUE(
        engine::Generator::check_eviction(*testing::model().model, quant::KvDType::F32, 512, ev)
            .ok());
    engine::Generator gen(*testing::model().model, testing::cpu_backend(2), 512, {}, ev);
    engine::SamplingParams greedy;
    greedy.temperature = 0;
    std::vector<int32_t> from_gen;
    auto st = gen.generate(
        prompt, greedy, 250,
        [&](int32_t t) {
            from_gen.push_back(t);
            return true;
        },
        nullptr);
    ASSERT_TRUE(st.ok()) << st.error().message;
    EXPECT_GT(gen.evicted(), 200);
    auto e = testing::make_engine(eviction_config(96));
    const auto got = testing::run_all(*e, {prompt}, {testing::greedy(250)});
    EXPECT_EQ(from_gen, got[0].tokens.at(0));

    // Cutting the history inside what was evicted starts over; after it, trims the table.
    gen.truncate(gen.position() - 5);
    EXPECT_EQ(gen.position(), 100 + 250 - 1 - 5);
    gen.truncate(10);
    EXPECT_EQ(gen.position(), 0);
    EXPECT_EQ(gen.evicted(), 0);

    ev.budget = 400;  // with a chunk of 256 over a 512 context
    EXPECT_FALSE(
        engine::Generator::check_eviction(*testing::model().model, quant::KvDType::F32, 512, ev)
            .ok());

    // Prompt lookup's trees while evicting: an accepted branch moves to slots counted after
    // the step's own eviction, and the text stays the plain stream's.
    // A text with forks (mat / hat / bat), so branches off the leading chain win.
    const auto forks = testing::model().tokenizer->encode(
        "the cat sat on the mat, the cat sat on the hat, the dog sat on the mat, the cat ran to "
        "the bat, the dog ran to the hat, the cat sat on the bat, the dog sat on the hat,",
        true, false);
    engine::NgramProposer tree(1, 3, true);
    int moved = 0;
    // A budget under the prompt, so branches win while the stream evicts; sampled with a seed,
    // as plain decoding samples it.
    engine::SamplingParams seeded = greedy;
    seeded.temperature = 1.0f;
    seeded.top_k = 0;
    seeded.top_p = 1;
    seeded.min_p = 0;
    seeded.seed = 5;
    seeded.has_seed = true;
    {
        ev.budget = 64;
        std::vector<int32_t> runs[2];
        for (int with_tree = 0; with_tree < 2; ++with_tree) {
            engine::Generator g(*testing::model().model, testing::cpu_backend(2), 512, {}, ev);
            engine::SpecRun spec;
            if (with_tree) spec = {&tree, 6, engine::SpecPolicy::Fixed};
            auto ts = g.generate(
                forks, greedy, 250,
                [&](int32_t t) {
                    runs[with_tree].push_back(t);
                    return true;
                },
                nullptr, spec);
            ASSERT_TRUE(ts.ok()) << ts.error().message;
            EXPECT_GT(g.evicted(), 100);
            if (with_tree) moved += ts->spec_tree_moved_steps;
        }
        EXPECT_EQ(runs[1], runs[0]);
    }
    EXPECT_GT(moved, 0);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST(KvEvictionH2O, GivesBackTheLeastAttendedMiddleBlocks) {
    BlockManager bm(32, 16, false);
    BlockTable t;
    std::vector<engine::BlockCopy> copies;
    ASSERT_TRUE(bm.allocate(t, 0, 150, copies));  // blocks 0..9, the last partial
    const std::vector<int32_t> orig = t.blocks;
    // Block 0 the sink; the recent window (the last 48 positions: 102..149) holds blocks 6..9;
    // candidates 1..5, of which 3 and then 1 drew the least.
    t.mass = {9.0f, 0.5f, 4.0f, 0.1f, 2.0f, 3.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    ASSERT_EQ(bm.evict_light(t, 150, 118, 1, 48), 32);
    EXPECT_EQ(t.blocks, (std::vector<int32_t>{orig[0], orig[2], orig[4], orig[5], orig[6], orig[7],
                                              orig[8], orig[9]}));
    EXPECT_EQ(t.mass, (std::vector<float>{9.0f, 4.0f, 2.0f, 3.0f, 0.0f, 0.0f, 0.0f, 0.0f}));
    EXPECT_EQ(t.evicted, 32);
    EXPECT_TRUE(t.sink_sources.empty());  // nothing is moved
    EXPECT_EQ(bm.pool().num_used(), 8);
    // Only the sink and the recent window left to keep: nothing more can go.
    t.mass.assign(t.blocks.size(), 0.0f);
    EXPECT_EQ(bm.evict_light(t, 118, 16, 1, 100), 0);
    bm.release(t);
    EXPECT_EQ(bm.pool().num_used(), 0);
    EXPECT_TRUE(bm.pool().consistent());
}

TEST(KvEvictionH2O, TheRunnerSumsEachHeadsWeightsOverTheBlocks) {
    // Each head's softmax weights add up to 1 in every layer, so a sequence's mass sums to
    // n_layer x n_head for each token it counts; a sequence that did not ask gets none.
    const auto& lm = testing::default_model();
    engine::ModelRunner r(*lm.model, testing::cpu_backend(2), 8, 16);
    const auto a = text_tokens(40), b = text_tokens(20);
    const std::vector<int32_t> ba = {0, 1, 2}, bb = {3, 4};
    engine::ModelRunner::Work w[] = {{a, 0, ba, 1, 0, 30}, {b, 0, bb, 1, 0, 0}};
    r.run(w);
    const auto m = r.attention_mass(0);
    ASSERT_EQ(m.size(), 3u);
    const auto& c = lm.model->config();
    EXPECT_NEAR(m[0] + m[1] + m[2], 30.0 * c.n_layer * c.n_head, 0.5);
    EXPECT_GT(m[0], m[1]);  // the first block holds the attention sink
    EXPECT_TRUE(r.attention_mass(1).empty());
}

TEST(KvEvictionH2O, ServesWithinTheContextInBoundedMemory) {
    engine::EngineConfig c = eviction_config(96);
    c.kv_eviction.kind = engine::KvEvictionKind::H2O;
    c.max_num_batched_tokens = 64;
    auto e = testing::make_engine(c);
    const auto prompts = std::vector<std::vector<int32_t>>{text_tokens(150), text_tokens(30)};
    int64_t peak = 0;
    std::vector<testing::Collected> out(2);
    for (size_t i = 0; i < 2; ++i)
        ASSERT_TRUE(e->add_request(prompts[i], testing::greedy(200),
                                   [&out, i](const engine::TokenEvent& ev) {
                                       if (ev.token >= 0) out[i].tokens[0].push_back(ev.token);
                                   })
                        .ok());
    while (e->has_work()) {
        e->step();
        peak = std::max(peak, e->metrics().kv_blocks_used);
    }
    EXPECT_EQ(out[0].tokens[0].size(), 200u);
    EXPECT_EQ(out[1].tokens[0].size(), 200u);
    EXPECT_GT(e->metrics().kv_evicted_tokens, 300u);
    EXPECT_LE(peak, 2 * ((96 + 64) / 16 + 1));
    testing::expect_all_free(*e);
    // H2O keeps positions, so the context still bounds a sequence.
    const auto too_long = text_tokens(600);
    EXPECT_FALSE(e->add_request(too_long, testing::greedy(4), nullptr).ok());
    // int8 keys are fine: nothing is moved.
    c.kv_dtype = quant::KvDType::Int8;
    EXPECT_TRUE(engine::Engine::create(testing::model(), c).ok());
}

}  // namespace
}  // namespace ferry
