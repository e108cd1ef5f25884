// Medusa heads: the file round-trips and refuses what does not fit; training on the model's own
// continuations learns (loss down, held-out agreement up); and drafting from them changes speed,
// never output: greedy and seeded-sampled text identical to plain decoding, alone and in an
// engine batch, with every KV block back in the pool, for chains and for trees (whose one pass
// gives each branch the logits its own chain would have).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <functional>

#include "calibrate/medusa_training.h"
#include "engine/generator.h"
#include "engine/medusa_proposer.h"
#include "engine/speculation.h"
#include "engine_test_util.h"
#include "gguf/gguf_writer.h"
#include "kernel_levels.h"
#include "kernels/cpu/dispatch.h"
#include "model/medusa_heads.h"
#include "tree_test_util.h"

using namespace ferry::engine;
namespace gguf = ferry::gguf;
namespace calibrate = ferry::calibrate;
using MedusaHeads = ferry::model::MedusaHeads;
using namespace ferry::testing;

namespace {

std::string temp(const char* name) {
    return ::testing::TempDir() + "/" + name;
}

// Heads trained once for the whole file on a short text: small, so the unit run stays quick.
struct Trained {
    MedusaHeads heads;
    calibrate::MedusaTrainReport report;
    std::string path;
};
const Trained& trained() {
    static const Trained t = [] {
        const std::string text =
            "The lighthouse keeper climbed the stairs every evening at dusk. He lit the lamp, "
            "wound the clockwork that turned the lens, and wrote the weather in his log. Ships "
            "passed far out at sea, and on clear nights he could count their lights. In the "
            "morning he put the lamp out, cleaned the glass and slept until noon.";
        const auto tokens = model().tokenizer->encode(text, false, false);
        calibrate::MedusaTrainOptions o;
        o.heads = 2;
        o.tokens = 384;
        o.prompt_len = 16;
        o.continuation = 48;
        o.epochs = 2;
        Trained out;
        auto h = calibrate::train_medusa(model(), tokens, o, &out.report);
        EXPECT_TRUE(h.ok()) << h.error().message;
        if (h.ok()) out.heads = std::move(*h);
        out.path = temp("ferry_medusa_test.medusa.gguf");
        EXPECT_TRUE(out.heads.save(out.path).ok());
        return out;
    }();
    return t;
}

std::vector<std::vector<int32_t>> prompts() {
    const auto& tok = *model().tokenizer;
    std::vector<std::vector<int32_t>> out;
    for (const char* t : {"The lighthouse keeper climbed the stairs",
                          "Repeat after me: the quick brown fox jumps over the lazy dog. The quick",
                          "1, 2, 3, 4, 5, 6, 7, 8,", "Once upon a time, in a land far away,"})
        out.push_back(tok.encode(t, true, false));
    return out;
}

SamplingParams seeded(uint64_t seed) {
    SamplingParams sp = greedy(1).sampling;
    sp.temperature = 0.8f;
    sp.top_k = 0;
    sp.top_p = 1;
    sp.min_p = 0;
    sp.seed = seed;
    sp.has_seed = true;
    return sp;
}

// The prompts and a few mixed ones through an engine drafting with the trained heads as `spec`
// says, in 4-token blocks (rollbacks and moves across block boundaries): every output plain
// decoding's, every block back in the pool. Returns the engine's metrics.
EngineMetrics engine_matches_plain_decoding(const std::function<void(SpecConfig&)>& spec,
                                            uint32_t seed) {
    auto ps = prompts();
    for (auto& q : mixed_prompts(6, seed)) ps.push_back(q);
    std::vector<RequestParams> params;
    for (size_t i = 0; i < ps.size(); ++i) params.push_back(greedy(10 + int(i % 4) * 7));
    auto plain = make_engine(small_config());
    const auto expected = run_all(*plain, ps, params);
    auto cfg = small_config();
    cfg.block_size = 4;
    cfg.spec.method = SpecMethod::Medusa;
    cfg.spec.medusa_heads = trained().path;
    spec(cfg.spec);
    auto engine = make_engine(cfg);
    const auto got = run_all(*engine, ps, params);
    for (size_t i = 0; i < ps.size(); ++i)
        EXPECT_EQ(got[i].tokens.at(0), expected[i].tokens.at(0)) << "request " << i;
    expect_all_free(*engine);
    return engine->metrics();
}

}  // namespace

TEST(MedusaHeads, RoundTripAndRefuseWhatDoesNotFit) {
    auto h = MedusaHeads::zeros(2, 8, 100);
    for (size_t i = 0; i < h.w[1].size(); ++i) h.w[1][i] = 0.01f * static_cast<float>(i);
    h.b[0][3] = -2.5f;
    h.trained_on = "toy.gguf";
    const std::string path = temp("ferry_medusa_roundtrip.gguf");
    ASSERT_TRUE(h.save(path).ok());
    auto back = MedusaHeads::load(path);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->n_heads(), 2);
    EXPECT_EQ(back->w, h.w);
    EXPECT_EQ(back->b, h.b);
    EXPECT_EQ(back->trained_on, "toy.gguf");

    ferry::model::LlamaConfig c;
    c.n_embd = 8;
    c.n_vocab = 100;
    EXPECT_TRUE(back->check_fits(c).ok());
    c.n_embd = 16;
    const ferry::Status s = back->check_fits(c);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("width 8"), std::string::npos) << s.error().message;

    // A model file is not a heads file; a heads file without its tensors is refused by name.
    auto not_heads = MedusaHeads::load(model().path);
    ASSERT_FALSE(not_heads.ok());
    EXPECT_NE(not_heads.error().message.find("not a Medusa heads file"), std::string::npos);
    gguf::Writer w;
    w.set("general.architecture", gguf::make_string("medusa"));
    w.set("medusa.head_count", gguf::make_u32(1));
    w.set("medusa.embedding_length", gguf::make_u32(8));
    w.set("medusa.vocab_size", gguf::make_u32(100));
    const std::string empty = temp("ferry_medusa_empty.gguf");
    ASSERT_TRUE(w.write(empty).ok());
    auto missing = MedusaHeads::load(empty);
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.error().message.find("medusa.0.weight"), std::string::npos);
}

TEST(Medusa, TrainingOnTheModelsContinuationsLearnsThem) {
    const auto& r = trained().report;
    ASSERT_EQ(r.loss_first.size(), 2u);
    EXPECT_GT(r.train_positions, 200);
    EXPECT_GT(r.held_out_positions, 10);
    for (size_t k = 0; k < 2; ++k) {
        EXPECT_LT(r.loss_last[k], 0.8 * r.loss_first[k]) << "head " << k;
        // Untrained, a head repeats the model's next token, which is rarely the one after it.
        EXPECT_GT(r.top1_after[k], r.top1_before[k]) << "head " << k;
    }
    EXPECT_GT(r.top1_after[0], r.top1_before[0] + 0.05);
}

TEST(Medusa, GeneratorOutputIsPlainDecodingsGreedyAndSeeded) {
    auto p = MedusaProposer::create(model(), trained().heads);
    ASSERT_TRUE(p.ok()) << p.error().message;
    Generator gen(*model().model, cpu_backend(2), 512);
    int accepted = 0, drafted = 0;
    for (const auto& prompt : prompts()) {
        const auto plain = generate(gen, prompt, 32, {});
        for (int k : {1, 3}) {  // 3 > the 2 heads: drafts stop at the last head
            GenerationStats st;
            EXPECT_EQ(generate(gen, prompt, 32, {p->get(), k, SpecPolicy::Fixed}, &st), plain)
                << "k " << k;
            accepted += st.spec_accepted_tokens;
            drafted += st.spec_draft_tokens;
            EXPECT_LE(st.spec_draft_tokens, 2 * st.spec_steps);
        }
        EXPECT_EQ(generate(gen, prompt, 32, {p->get(), 2, SpecPolicy::Cost}), plain) << "cost";
        const SamplingParams sp = seeded(11);
        EXPECT_EQ(generate(gen, prompt, 32, {p->get(), 2, SpecPolicy::Fixed}, nullptr, sp),
                  generate(gen, prompt, 32, {}, nullptr, sp))
            << "seeded sampling";
    }
    EXPECT_GT(drafted, 100);
    EXPECT_GT(accepted, 0);
}

TEST(Medusa, EngineBatchIsPlainDecodingsAndGivesBackEveryBlock) {
    const auto m = engine_matches_plain_decoding(
        [](SpecConfig& c) {
            c.k = 2;
            c.policy = SpecPolicy::Fixed;
        },
        7);
    EXPECT_GT(m.spec_draft_tokens, 0u);
    EXPECT_GT(m.spec_accepted_tokens, 0u);
    EXPECT_GT(m.spec_draft_tokens, m.spec_accepted_tokens);  // rejections happened too
}

TEST(Medusa, NeedsHeadsThatFitTheModel) {
    auto cfg = small_config();
    cfg.spec.method = SpecMethod::Medusa;
    cfg.spec.medusa_heads = temp("ferry_no_such_heads.gguf");
    EXPECT_FALSE(Engine::create(model(), cfg).ok());
    // Heads for another width are refused by name.
    const std::string other = temp("ferry_medusa_other.gguf");
    ASSERT_TRUE(MedusaHeads::zeros(1, 8, model().model->config().n_vocab).save(other).ok());
    cfg.spec.medusa_heads = other;
    auto e = Engine::create(model(), cfg);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().message.find("ferry train-medusa"), std::string::npos) << e.error().message;
    // A request may ask for medusa only where the server has heads.
    auto off = make_engine(small_config());
    auto p = greedy(4);
    p.spec = SpecMethod::Medusa;
    auto r = off->add_request({1, 2, 3}, p, nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("medusa"), std::string::npos);
}

// The likeliest tree within the budget, its leading chain first, parents before children.
TEST(MedusaTree, BuildsTheLikeliestTreeLeadingChainFirst) {
    using C = Sampler::Candidate;
    const std::vector<std::vector<C>> cand = {{{10, 0, 0.6f}, {11, 0, 0.3f}, {12, 0, 0.1f}},
                                              {{20, 0, 0.5f}, {21, 0, 0.4f}, {22, 0, 0.1f}}};
    Draft d;
    // Likeliest: 10 (.6), 11 and 10-20 (.3 each), 10-21 (.24); then 11-20 (.15).
    MedusaProposer::build_tree(cand, 4, d);
    EXPECT_EQ(d.tokens, (std::vector<int32_t>{10, 20, 11, 21}));
    EXPECT_EQ(d.parent, (std::vector<int32_t>{-1, 0, -1, 0}));
    MedusaProposer::build_tree(cand, 5, d);
    EXPECT_EQ(d.tokens, (std::vector<int32_t>{10, 20, 11, 21, 20}));
    EXPECT_EQ(d.parent, (std::vector<int32_t>{-1, 0, -1, 0, 2}));
    MedusaProposer::build_tree(cand, 1, d);
    EXPECT_EQ(d.tokens, (std::vector<int32_t>{10}));
    MedusaProposer::build_tree(cand, 100, d);  // every candidate: 3 + 9
    EXPECT_EQ(d.tokens.size(), 12u);
    for (size_t i = 0; i < d.parent.size(); ++i) EXPECT_LT(d.parent[i], static_cast<int32_t>(i));
}

// Tree attention: in one pass each draft token gets the logits its branch, run as a chain, gets
// (its own rotation position, only its ancestors seen), bit for bit at every level; and an
// accepted branch moved down to its slots continues exactly as if it had run as a chain.
TEST(MedusaTree, EachBranchGetsItsChainsLogitsAndMovesDown) {
    ferry::testing::LevelGuard guard;
    for (const auto level : ferry::testing::simd_levels(true)) {
        ferry::kernels::cpu::set_cpu_level(level);
        SCOPED_TRACE(ferry::kernels::cpu::cpu_level_name(level));
        expect_tree_is_its_chains(
            *model().model, cpu_backend(2),
            model().tokenizer->encode("The lighthouse keeper climbed", true, false));
    }
}

TEST(MedusaTree, GeneratorAndEngineOutputIsPlainDecodingsGreedyAndSeeded) {
    auto p = MedusaProposer::create(model(), trained().heads, 6);
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_TRUE((*p)->drafts_trees());
    EXPECT_EQ((*p)->max_draft(), 6);
    Generator gen(*model().model, cpu_backend(2), 512);
    int accepted = 0, moved = 0;
    for (const auto& prompt : prompts()) {
        const auto plain = generate(gen, prompt, 32, {});
        GenerationStats st;
        EXPECT_EQ(generate(gen, prompt, 32, {p->get(), 4, SpecPolicy::Fixed}, &st), plain);
        accepted += st.spec_accepted_tokens;
        moved += st.spec_tree_moved_steps;
        EXPECT_LE(st.spec_draft_tokens, 6 * st.spec_steps);  // the tree's budget, not --spec-k
        EXPECT_GT(st.spec_draft_tokens, 4 * st.spec_steps);
        const SamplingParams sp = seeded(3);
        EXPECT_EQ(generate(gen, prompt, 32, {p->get(), 4, SpecPolicy::Fixed}, nullptr, sp),
                  generate(gen, prompt, 32, {}, nullptr, sp))
            << "seeded sampling";
    }
    EXPECT_GT(accepted, 0);
    EXPECT_GT(moved, 0);  // branches other than the leading chain were accepted too

    const auto mt = engine_matches_plain_decoding(
        [](SpecConfig& c) {
            c.medusa_tree = 6;
            c.policy = SpecPolicy::Fixed;
        },
        9);
    EXPECT_GT(mt.spec_accepted_tokens, 0u);
    EXPECT_GT(mt.spec_tree_moved_steps, 0u);
}
