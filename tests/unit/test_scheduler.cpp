// The scheduler and block pool on their own, driven by a randomized workload (random arrivals,
// prompt and output lengths, priorities, aborts), with the invariants checked after every step.
// No model runs: "computing" a chunk just marks its tokens as cached.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "engine/scheduler.h"

using namespace ferry::engine;

namespace {

struct World {
    std::vector<std::unique_ptr<Request>> requests;
    std::vector<std::unique_ptr<Sequence>> seqs;
};

Sequence* new_request(World& w, std::mt19937& rng, uint64_t arrival, int prompt_len, int out_len,
                      int vocab_span) {
    auto r = std::make_unique<Request>();
    r->id = arrival + 1;
    r->arrival = arrival;
    r->arrival_time = Clock::now();
    r->params.max_tokens = out_len;
    r->params.priority = static_cast<int>(rng() % 3);
    for (int i = 0; i < prompt_len; ++i)
        r->prompt.push_back(static_cast<int32_t>(rng() % vocab_span));
    auto s = std::make_unique<Sequence>();
    s->id = arrival;
    s->request = r.get();
    s->tokens = r->prompt;
    s->prompt_len = prompt_len;
    Sequence* p = s.get();
    w.requests.push_back(std::move(r));
    w.seqs.push_back(std::move(s));
    return p;
}

void check_invariants(const Scheduler& sch, const std::vector<Sequence*>& live, int block_size,
                      int window) {
    ASSERT_TRUE(sch.pool().consistent());
    const ferry::kv::BlockPool* wp = sch.window_pool();
    if (wp) {
        ASSERT_TRUE(wp->consistent());
    }
    std::map<int32_t, int> holders, window_holders;
    for (const Sequence* s : live) {
        if (s->status != SeqStatus::Running) continue;
        // Every cached token has a slot.
        ASSERT_GE(static_cast<int64_t>(s->kv.blocks.size()) * block_size, s->num_computed);
        ASSERT_LE(s->num_computed, static_cast<int>(s->tokens.size()));
        for (int32_t b : s->kv.blocks) ++holders[b];
        if (!wp) continue;
        // The window table covers the same positions, but holds only the window's blocks.
        ASSERT_EQ(s->kv_window.blocks.size(), s->kv.blocks.size());
        const int64_t first_needed = std::max<int64_t>(0, s->num_computed - window + 1);
        ASSERT_LE(static_cast<int64_t>(s->kv_window.n_dropped) * block_size, first_needed);
        ASSERT_LE(static_cast<int64_t>(s->kv_window.blocks.size() - s->kv_window.n_dropped),
                  (window + 64) / block_size + 3);  // the window, a step's chunk, two partial
        for (size_t j = s->kv_window.n_dropped; j < s->kv_window.blocks.size(); ++j)
            ++window_holders[s->kv_window.blocks[j]];
    }
    for (auto [b, n] : holders) ASSERT_EQ(sch.pool().ref(b), n) << "block " << b;
    for (auto [b, n] : window_holders) ASSERT_EQ(wp->ref(b), n) << "window block " << b;
}

// window > 0 with window_blocks > 0: a hybrid cache (some layers slide, in a pool of their own).
void run_random(EngineConfig cfg, uint32_t seed, int vocab_span, int window = 0,
                int64_t window_blocks = 0) {
    std::mt19937 rng(seed);
    const int max_len = 256;
    Scheduler sch(cfg, max_len, 48, window, window_blocks);
    World w;
    std::vector<Sequence*> live;
    uint64_t arrivals = 0;
    int finished = 0, aborted = 0;
    const int total = 60;
    for (int step = 0; step < 20000 && (arrivals < total || !live.empty()); ++step) {
        // Random arrivals.
        while (arrivals < total && rng() % 3 == 0) {
            Sequence* s =
                new_request(w, rng, arrivals++, 1 + rng() % 120, 1 + rng() % 60, vocab_span);
            sch.add(s);
            live.push_back(s);
        }
        // Random aborts.
        if (!live.empty() && rng() % 17 == 0) {
            Sequence* s = live[rng() % live.size()];
            sch.remove(s);
            live.erase(std::find(live.begin(), live.end(), s));
            ++aborted;
        }
        SchedulerOutput out = sch.schedule(Clock::now());
        ASSERT_LE(out.total_tokens, cfg.max_num_batched_tokens);
        ASSERT_LE(static_cast<int>(out.seqs.size()), cfg.max_num_seqs);
        std::set<const Sequence*> once;
        for (const auto& s : out.seqs) {
            const Sequence* q = sch.sequence(s.seq_id);
            ASSERT_NE(q, nullptr);
            ASSERT_TRUE(once.insert(q).second) << "a sequence scheduled twice in one step";
            ASSERT_GT(s.num_tokens(), 0);
            ASSERT_GE(static_cast<int64_t>(q->kv.blocks.size()) * cfg.block_size,
                      q->num_computed + s.num_tokens());
            // The plain output says what the sequence holds: its next tokens from the first
            // uncomputed position, and its block table.
            ASSERT_EQ(s.start_pos, q->num_computed);
            ASSERT_TRUE(
                std::equal(s.tokens.begin(), s.tokens.end(), q->tokens.begin() + q->num_computed));
            ASSERT_EQ(s.blocks, q->kv.blocks);
            ASSERT_EQ(s.window_blocks, q->kv_window.blocks);
            // Every block written this step is held by this sequence alone (copy-on-write done).
            const int64_t first = q->num_computed / cfg.block_size;
            const int64_t last = (q->num_computed + s.num_tokens() - 1) / cfg.block_size;
            for (int64_t j = first; j <= last; ++j) {
                ASSERT_EQ(sch.pool().ref(q->kv.blocks[j]), 1) << j;
                if (sch.window_pool()) {
                    ASSERT_GE(j, static_cast<int64_t>(q->kv_window.n_dropped));
                    ASSERT_EQ(sch.window_pool()->ref(q->kv_window.blocks[j]), 1) << j;
                }
            }
        }
        for (const auto& s : out.seqs) sch.on_computed(sch.sequence(s.seq_id), s.num_tokens());
        for (const auto& s : out.seqs) {
            if (!s.wants_logits) continue;
            Sequence* q = sch.sequence(s.seq_id);
            q->tokens.push_back(static_cast<int32_t>(rng() % vocab_span));
            if (q->output_len() >= q->request->params.max_tokens ||
                static_cast<int>(q->tokens.size()) >= max_len) {
                sch.remove(q);
                live.erase(std::find(live.begin(), live.end(), q));
                ++finished;
            }
        }
        check_invariants(sch, live, cfg.block_size, window);
        if (::testing::Test::HasFatalFailure()) return;
    }
    EXPECT_EQ(finished + aborted, total) << "every request ends (none starved)";
    EXPECT_EQ(sch.pool().num_used(), 0);
    if (sch.window_pool()) {
        EXPECT_EQ(sch.window_pool()->num_used(), 0);
        EXPECT_GT(sch.dropped_blocks(), 0u);
    }
    EXPECT_EQ(sch.num_running() + sch.num_waiting(), 0);
}

EngineConfig base_config() {
    EngineConfig c;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 64;
    c.block_size = 16;
    return c;
}

}  // namespace

TEST(Scheduler, RandomWorkloadKeepsInvariantsPaged) {
    run_random(base_config(), 1, 50000);
}

TEST(Scheduler, RandomWorkloadWithSharedPrefixes) {
    // A tiny vocabulary makes prompts share prefixes often, exercising cache hits and eviction.
    run_random(base_config(), 2, 2);
}

// A hybrid cache: the sliding layers' tables hold only the window (40 positions) in their own
// pool, growing in step with the other tables; shared prefixes must find their windows cached
// too. With 44 window blocks the pool never binds; with 12 it does, and preempts.
TEST(Scheduler, RandomWorkloadHybridWindowPool) {
    run_random(base_config(), 6, 50000, 40, 44);
    run_random(base_config(), 7, 2, 40, 44);
    run_random(base_config(), 8, 2, 40, 12);
    auto c = base_config();
    c.prefix_cache = false;
    run_random(c, 9, 2, 40, 12);
}

TEST(Scheduler, RandomWorkloadPrefixCacheOff) {
    auto c = base_config();
    c.prefix_cache = false;
    run_random(c, 3, 2);
}

TEST(Scheduler, RandomWorkloadStaticBatching) {
    auto c = base_config();
    c.batching = EngineConfig::Batching::Static;
    c.batch_wait_ms = 0;
    run_random(c, 4, 50000);
}

TEST(Scheduler, RandomWorkloadContiguousKv) {
    auto c = base_config();
    c.kv_layout = EngineConfig::KvLayout::Contiguous;
    run_random(c, 5, 50000);
}

TEST(Scheduler, ChunkedPrefillSharesTheStepWithDecodes) {
    auto cfg = base_config();
    cfg.max_num_batched_tokens = 32;
    Scheduler sch(cfg, 4096, 512);
    World w;
    std::mt19937 rng(7);
    Sequence* small = new_request(w, rng, 0, 8, 100, 1000);
    sch.add(small);
    auto out = sch.schedule(Clock::now());
    ASSERT_EQ(out.seqs.size(), 1u);
    sch.on_computed(small, out.seqs[0].num_tokens());
    small->tokens.push_back(1);  // now decoding
    Sequence* big = new_request(w, rng, 1, 1000, 10, 1000);
    sch.add(big);
    for (int step = 0; step < 5; ++step) {
        out = sch.schedule(Clock::now());
        // The decode keeps its token every step while the long prompt advances in chunks.
        ASSERT_EQ(out.seqs.size(), 2u);
        EXPECT_EQ(out.seqs[0].seq_id, small->id);
        EXPECT_EQ(out.seqs[0].num_tokens(), 1);
        EXPECT_EQ(out.seqs[1].seq_id, big->id);
        EXPECT_EQ(out.seqs[1].num_tokens(), 31);
        EXPECT_FALSE(out.seqs[1].wants_logits);
        for (const auto& s : out.seqs) sch.on_computed(sch.sequence(s.seq_id), s.num_tokens());
        small->tokens.push_back(1);
    }
}

TEST(Scheduler, PrefixHitReusesBlocksAndLeavesOneTokenToCompute) {
    auto cfg = base_config();
    Scheduler sch(cfg, 4096, 64);
    World w;
    std::mt19937 rng(8);
    Sequence* a = new_request(w, rng, 0, 48, 4, 1000);
    sch.add(a);
    auto out = sch.schedule(Clock::now());
    for (const auto& s : out.seqs) sch.on_computed(sch.sequence(s.seq_id), s.num_tokens());
    sch.remove(a);  // its three full blocks stay cached
    EXPECT_EQ(sch.pool().num_cached(), 3);

    Sequence* b = new_request(w, rng, 1, 0, 4, 1000);
    b->tokens = a->request->prompt;  // the same 48 tokens
    b->request->prompt = b->tokens;
    b->prompt_len = 48;
    sch.add(b);
    out = sch.schedule(Clock::now());
    ASSERT_EQ(out.seqs.size(), 1u);
    // Two blocks reused; the third would leave nothing to compute, so it is recomputed.
    EXPECT_EQ(out.seqs[0].num_tokens(), 16);
    EXPECT_EQ(sch.prefix_hit_tokens(), 32u);
}

namespace {

// Runs a step's tokens as computed; a sequence that wanted logits gets its next token.
void compute(Scheduler& sch, const SchedulerOutput& out) {
    for (const auto& s : out.seqs) {
        Sequence* q = sch.sequence(s.seq_id);
        sch.on_computed(q, s.num_tokens());
        if (s.wants_logits) q->tokens.push_back(1);
    }
}

const ScheduledSeq* find(const SchedulerOutput& out, const Sequence* s) {
    for (const auto& x : out.seqs)
        if (x.seq_id == s->id) return &x;
    return nullptr;
}

}  // namespace

// With every seat taken, a request of a better priority boards at once by preempting the
// worst, most recent running one (which resumes, recomputed, once a seat frees); a request of
// the same priority waits its turn.
TEST(Scheduler, ABetterPriorityPreemptsTheWorstRunning) {
    auto cfg = base_config();
    cfg.max_num_seqs = 2;
    Scheduler sch(cfg, 4096, 512);
    World w;
    std::mt19937 rng(11);
    Sequence* a = new_request(w, rng, 0, 20, 50, 1000);
    Sequence* b = new_request(w, rng, 1, 20, 50, 1000);
    a->request->params.priority = 1;
    b->request->params.priority = 1;
    sch.add(a);
    sch.add(b);
    compute(sch, sch.schedule(Clock::now()));
    ASSERT_EQ(sch.num_running(), 2);

    Sequence* same = new_request(w, rng, 2, 20, 5, 1000);
    same->request->params.priority = 1;
    sch.add(same);
    auto out = sch.schedule(Clock::now());
    EXPECT_EQ(find(out, same), nullptr) << "an equal priority does not preempt";
    EXPECT_EQ(sch.priority_preemptions(), 0u);
    compute(sch, out);

    Sequence* urgent = new_request(w, rng, 3, 20, 5, 1000);
    urgent->request->params.priority = 0;
    sch.add(urgent);
    out = sch.schedule(Clock::now());
    ASSERT_NE(find(out, urgent), nullptr) << "boards in the step it arrived";
    EXPECT_EQ(find(out, urgent)->num_tokens(), 20);
    EXPECT_NE(find(out, a), nullptr) << "the earlier of the two keeps its seat";
    EXPECT_EQ(find(out, b), nullptr);
    EXPECT_EQ(b->status, SeqStatus::Waiting);
    EXPECT_EQ(b->num_computed, 0) << "preempted by recomputation: its blocks went back";
    EXPECT_EQ(sch.priority_preemptions(), 1u);
    EXPECT_EQ(sch.preemptions(), 1u);
    compute(sch, out);

    // The urgent one finishes; the preempted one boards again before the later, equal one.
    while (urgent->output_len() < 5) compute(sch, sch.schedule(Clock::now()));
    sch.remove(urgent);
    out = sch.schedule(Clock::now());
    ASSERT_NE(find(out, b), nullptr);
    // Its prompt and two output tokens again, the first full block found in the prefix cache.
    EXPECT_EQ(find(out, b)->start_pos, 16);
    EXPECT_EQ(find(out, b)->num_tokens(), 6);
    EXPECT_EQ(find(out, same), nullptr);
    EXPECT_EQ(sch.preemptions(), 1u);
}

// Blocks, not seats: a better priority that cannot get the blocks of its first chunk takes them
// from the worst running one.
TEST(Scheduler, ABetterPriorityTakesBlocksFromTheWorstRunning) {
    auto cfg = base_config();
    Scheduler sch(cfg, 4096, 8);  // 128 token slots
    World w;
    std::mt19937 rng(12);
    Sequence* low = new_request(w, rng, 0, 100, 50, 1000);
    low->request->params.priority = 5;
    sch.add(low);
    compute(sch, sch.schedule(Clock::now()));
    compute(sch, sch.schedule(Clock::now()));
    ASSERT_EQ(low->num_computed, 100);
    Sequence* high = new_request(w, rng, 1, 60, 5, 1000);
    high->request->params.priority = -3;
    sch.add(high);
    auto out = sch.schedule(Clock::now());
    ASSERT_NE(find(out, high), nullptr);
    EXPECT_EQ(find(out, low), nullptr);
    EXPECT_EQ(sch.priority_preemptions(), 1u);
    ASSERT_TRUE(sch.pool().consistent());
}

// The latency target's token limit: prefill fills what the decodes leave of it, and never
// less than a minimum chunk, so a prompt keeps boarding behind a batch that alone is over it.
TEST(Scheduler, StepTokenLimitBoundsPrefillWhileOthersDecode) {
    auto cfg = base_config();
    cfg.max_num_batched_tokens = 256;
    Scheduler sch(cfg, 4096, 512);
    World w;
    std::mt19937 rng(13);
    std::vector<Sequence*> decoders;
    for (int i = 0; i < 3; ++i) {
        decoders.push_back(new_request(w, rng, static_cast<uint64_t>(i), 8, 100, 1000));
        sch.add(decoders.back());
    }
    compute(sch, sch.schedule(Clock::now(), 40));  // nobody decodes yet: the whole budget
    Sequence* big = new_request(w, rng, 3, 1000, 10, 1000);
    sch.add(big);
    auto out = sch.schedule(Clock::now(), 40);
    ASSERT_NE(find(out, big), nullptr);
    EXPECT_EQ(find(out, big)->num_tokens(), 37) << "40 minus the three decodes";
    EXPECT_EQ(out.total_tokens, 40);
    compute(sch, out);
    out = sch.schedule(Clock::now(), 5);
    EXPECT_EQ(find(out, big)->num_tokens(), Scheduler::kMinPrefillChunk);
    compute(sch, out);
    out = sch.schedule(Clock::now());  // no limit: the fixed chunk while decoding
    EXPECT_EQ(find(out, big)->num_tokens(), cfg.prefill_chunk_while_decoding);
    compute(sch, out);
    out = sch.schedule(Clock::now(), 1000);
    EXPECT_EQ(out.total_tokens, 256) << "the token budget still caps the step";
}
