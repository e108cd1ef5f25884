// Tensor parallelism's pieces without MPI: the split (model/tensor_split.h), the step messages
// rank 0 sends, and whole sharded forward passes run by ranks that are threads of this process
// (a LocalGroup communicator), whose logits must be the unsplit model's.
#include <barrier>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "engine/loaded_model.h"
#include "engine/model_runner.h"
#include "engine/step_message.h"
#include "model/tensor_split.h"
#include "quant/quantize.h"
#include "test_util.h"

namespace ferry {
namespace {

using model::Range;

// N ranks as N threads: every collective deposits its part, waits for the others, reads.
class LocalGroup {
  public:
    explicit LocalGroup(int n) : n_(n), sync_(n), parts_(static_cast<size_t>(n)) {}

    class Rank final : public comm::Communicator {
      public:
        Rank(LocalGroup& g, int r) : g_(g), r_(r) {}
        int rank() const override { return r_; }
        int size() const override { return g_.n_; }
        void all_reduce_sum(std::span<float> data) override {
            deposit(data);
            for (size_t i = 0; i < data.size(); ++i) {
                float s = g_.parts_[0][i];
                for (int r = 1; r < g_.n_; ++r) s += g_.parts_[static_cast<size_t>(r)][i];
                data[i] = s;
            }
            g_.sync_.arrive_and_wait();
        }
        void gather(std::span<const float> mine, std::span<float> all,
                    std::span<const int> counts) override {
            deposit(mine);
            if (r_ == 0) {
                size_t at = 0;
                for (int r = 0; r < g_.n_; ++r) {
                    const auto& p = g_.parts_[static_cast<size_t>(r)];
                    EXPECT_EQ(p.size(), static_cast<size_t>(counts[static_cast<size_t>(r)]));
                    std::copy(p.begin(), p.end(), all.begin() + static_cast<ptrdiff_t>(at));
                    at += p.size();
                }
            }
            g_.sync_.arrive_and_wait();
        }
        void broadcast(std::vector<std::byte>& message, bool) override {
            if (r_ == 0) g_.message_ = message;
            g_.sync_.arrive_and_wait();
            if (r_ != 0) message = g_.message_;
            g_.sync_.arrive_and_wait();
        }
        void send(std::span<const float> data, int to) override { post_send(data, to); }
        void post_send(std::span<const float> data, int to) override {
            std::lock_guard lock(g_.mu_);
            g_.mail_[{r_, to}].emplace_back(data.begin(), data.end());
            g_.cv_.notify_all();
        }
        void wait_sends() override {}
        void recv(std::span<float> data, int from) override {
            std::unique_lock lock(g_.mu_);
            auto& box = g_.mail_[{from, r_}];
            g_.cv_.wait(lock, [&] { return !box.empty(); });
            ASSERT_EQ(box.front().size(), data.size());
            std::copy(box.front().begin(), box.front().end(), data.begin());
            box.pop_front();
        }
        std::optional<std::string> failure() const override { return std::nullopt; }
        void finish() override {
            std::vector<std::byte> stop;
            if (r_ == 0) broadcast(stop, false);
        }

      private:
        void deposit(std::span<const float> v) {
            g_.parts_[static_cast<size_t>(r_)].assign(v.begin(), v.end());
            g_.sync_.arrive_and_wait();
        }
        LocalGroup& g_;
        int r_;
    };

  private:
    int n_;
    std::barrier<> sync_;
    std::vector<std::vector<float>> parts_;
    std::vector<std::byte> message_;
    std::mutex mu_;  // point to point: a queue per (from, to), as MPI keeps their order
    std::condition_variable cv_;
    std::map<std::pair<int, int>, std::deque<std::vector<float>>> mail_;
};

TEST(TensorSplit, EvenSplitsCoverEverythingOnce) {
    for (int64_t n : {1, 7, 9, 48, 49152})
        for (int parts = 1; parts <= 5 && parts <= n; ++parts) {
            int64_t at = 0;
            for (int i = 0; i < parts; ++i) {
                const Range r = model::split_even(n, parts, i);
                EXPECT_EQ(r.begin, at);
                EXPECT_GE(r.size(), n / parts);
                EXPECT_LE(r.size(), n / parts + 1);
                at = r.end;
            }
            EXPECT_EQ(at, n);
        }
}

TEST(TensorSplit, RefusesWhatCannotBeSplitAndSaysWhy) {
    model::LlamaConfig c;
    c.n_head = 9, c.n_head_kv = 3, c.head_dim = 64, c.n_ff = 1536, c.n_vocab = 100, c.n_embd = 576;
    auto two = model::plan_split(c, DType::Q4_1, DType::Q4_1, 1, 2);
    ASSERT_TRUE(two.ok()) << two.error().message;
    EXPECT_EQ(two->kv_heads.begin, 2);  // 3 KV heads: 2 + 1
    EXPECT_EQ(two->kv_heads.end, 3);
    EXPECT_EQ(two->ffn.begin, 768);  // 48 blocks of 32: 24 + 24
    EXPECT_EQ(two->vocab.begin, 50);
    auto four = model::plan_split(c, DType::Q4_1, DType::Q4_1, 0, 4);
    ASSERT_FALSE(four.ok());
    EXPECT_NE(four.error().message.find("3 KV heads"), std::string::npos) << four.error().message;
    // 192 columns per KV head do not fall on q4_K's 256-element blocks.
    auto k = model::plan_split(c, DType::Q4_K, DType::Q4_1, 0, 3);
    ASSERT_FALSE(k.ok());
    EXPECT_NE(k.error().message.find("256-element"), std::string::npos) << k.error().message;
    auto int8 = model::plan_split(c, DType::INT8, DType::Q4_1, 0, 3);
    ASSERT_FALSE(int8.ok());
    // A mixture splits each expert's columns (and the shared expert's) as a dense MLP's.
    c.n_expert = 8, c.n_expert_used = 2, c.n_ff_expert = 768, c.n_ff_shared = 1536;
    auto moe = model::plan_split(c, DType::Q4_1, DType::Q4_1, 1, 3);
    ASSERT_TRUE(moe.ok()) << moe.error().message;
    EXPECT_EQ(moe->ffn.begin, 256);  // 24 blocks of 32: 8 each
    EXPECT_EQ(moe->ffn.end, 512);
    EXPECT_EQ(moe->shared_ffn.begin, 512);
    c.n_ff_expert = 80;  // 2.5 blocks
    auto odd = model::plan_split(c, DType::Q4_1, DType::Q4_1, 0, 2);
    ASSERT_FALSE(odd.ok());
    EXPECT_NE(odd.error().message.find("experts' MLP"), std::string::npos) << odd.error().message;
}

TEST(TensorSplit, ColumnSlicesAreTheRowsBlocks) {
    const int64_t rows = 3, cols = 128;
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
    std::vector<uint8_t> q(row_bytes(DType::Q8_0, cols) * rows);
    for (int64_t r = 0; r < rows; ++r)
        ASSERT_TRUE(quant::quantize_row(DType::Q8_0, &x[static_cast<size_t>(r * cols)],
                                        q.data() + r * row_bytes(DType::Q8_0, cols), cols));
    const Tensor m(q.data(), DType::Q8_0, {rows, cols});
    auto s = model::slice_columns(m, 32, 96);
    ASSERT_TRUE(s.ok()) << s.error().message;
    ASSERT_EQ(s->cols(), 64);
    for (int64_t r = 0; r < rows; ++r)
        EXPECT_EQ(
            std::memcmp(static_cast<const std::byte*>(s->raw()) + s->stride(0) * r,
                        q.data() + r * row_bytes(DType::Q8_0, cols) + row_bytes(DType::Q8_0, 32),
                        row_bytes(DType::Q8_0, 64)),
            0);
    EXPECT_FALSE(model::slice_columns(m, 16, 96).ok());   // mid-block
    EXPECT_FALSE(model::slice_columns(m, 32, 160).ok());  // past the end
}

TEST(CommStats, AddsGroupsAndSubtractsEarlierCountsKindByKind) {
    comm::CommStats a, b;
    a.sums = {3, 300, 0.5};
    a.stages = {1, 10, 0.25};
    b.sums = {2, 200, 0.25};
    b.gathers = {1, 4096, 1.0};
    b.steps = {5, 50, 0.125};
    comm::CommStats t = a;
    t += b;
    EXPECT_EQ(t.sums.calls, 5);
    EXPECT_EQ(t.sums.bytes, 500);
    EXPECT_DOUBLE_EQ(t.sums.seconds, 0.75);
    EXPECT_EQ(t.gathers.bytes, 4096);
    EXPECT_EQ(t.stages.calls, 1);
    EXPECT_EQ(t.steps.calls, 5);
    EXPECT_DOUBLE_EQ(t.seconds(), 0.75 + 1.0 + 0.25 + 0.125);
    const comm::CommStats d = t - a;  // what b added
    EXPECT_EQ(d.sums.calls, 2);
    EXPECT_EQ(d.sums.bytes, 200);
    EXPECT_EQ(d.stages.calls, 0);
    EXPECT_EQ(d.gathers.calls, 1);
    EXPECT_DOUBLE_EQ(d.seconds(), b.seconds());
}

TEST(StepMessage, RoundTripsAndRefusesTruncation) {
    engine::StepMessage m;
    m.copies = {{3, 7}, {1, 2}};
    m.window_copies = {{5, 0}};
    m.moves = {{7, 48}};
    m.slot_table = {4, 5};
    m.slot_from = {9, 11};
    m.slot_to = {6, 7};
    m.work = {{{1, 2, 3}, 5, 32, {0, 4}, {2, 2}, 1, {1, 3, 5}}, {{9}, 0, 0, {6}, {}, 0, {}}};
    std::vector<std::byte> bytes;
    engine::encode_step(m, bytes);
    auto back = engine::decode_step(bytes);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->copies, m.copies);
    EXPECT_EQ(back->window_copies, m.window_copies);
    EXPECT_EQ(back->moves, m.moves);
    ASSERT_EQ(back->work.size(), 2u);
    EXPECT_EQ(back->work[0].tokens, m.work[0].tokens);
    EXPECT_EQ(back->work[0].blocks, m.work[0].blocks);
    EXPECT_EQ(back->work[0].window_blocks, m.work[0].window_blocks);
    EXPECT_TRUE(back->work[1].window_blocks.empty());
    EXPECT_EQ(back->work[0].start_pos, 5);
    EXPECT_EQ(back->work[0].rope_offset, 32);
    EXPECT_EQ(back->work[1].n_logits, 0);
    EXPECT_EQ(back->work[0].tree, m.work[0].tree);
    EXPECT_TRUE(back->work[1].tree.empty());
    EXPECT_EQ(back->slot_table, m.slot_table);
    EXPECT_TRUE(back->slot_window_table.empty());
    EXPECT_EQ(back->slot_from, m.slot_from);
    EXPECT_EQ(back->slot_to, m.slot_to);
    for (size_t cut = 0; cut < bytes.size(); ++cut)
        EXPECT_FALSE(engine::decode_step({bytes.data(), cut}).ok()) << cut;
    // Masks that are no tree (a token that does not see itself, or sees a later one) are
    // refused, as a runner refuses them.
    for (std::vector<uint64_t> bad : {std::vector<uint64_t>{1, 1, 5}, {1, 7, 5}, {2, 3, 5}}) {
        auto b = m;
        b.work[0].tree = bad;
        engine::encode_step(b, bytes);
        EXPECT_FALSE(engine::decode_step(bytes).ok());
        EXPECT_FALSE(kernels::valid_tree_masks(bad, 3));
    }
    EXPECT_TRUE(kernels::valid_tree_masks(m.work[0].tree, 3));
    engine::StepMessage setup;
    setup.kind = engine::StepMessage::Kind::Setup;
    setup.setup = {40, 16, quant::KvDType::F16, 12, 170};
    engine::encode_step(setup, bytes);
    auto s = engine::decode_step(bytes);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->setup.n_blocks, 40);
    EXPECT_EQ(s->setup.kv_dtype, quant::KvDType::F16);
    EXPECT_EQ(s->setup.n_window_blocks, 12);
    EXPECT_EQ(s->setup.calibration_tokens, 170);
    bytes[bytes.size() - 16] = std::byte{9};  // no such KV type
    EXPECT_FALSE(engine::decode_step(bytes).ok());
    engine::StepMessage alive;
    alive.kind = engine::StepMessage::Kind::Keepalive;
    engine::encode_step(alive, bytes);
    EXPECT_EQ(bytes.size(), 1u);
    auto k = engine::decode_step(bytes);
    ASSERT_TRUE(k.ok());
    EXPECT_EQ(k->kind, engine::StepMessage::Kind::Keepalive);
    bytes.push_back(std::byte{0});
    EXPECT_FALSE(engine::decode_step(bytes).ok());
}

// Three steps of two sequences (a prefill of both, a decode of both, then a decode of the first
// as KV eviction runs it: its first block copied and its keys moved, its token at a rotary
// position past its cache slot) on `runner`: the logits of each step, back to back.
std::vector<float> three_steps(engine::ModelRunner& runner) {
    const std::vector<int32_t> a = {1, 5, 9, 14, 2, 7, 3}, b = {4, 8, 15, 16, 23};
    const std::vector<int32_t> blocks_a = {0, 1}, blocks_b = {2};
    std::vector<float> out;
    const engine::ModelRunner::Work prefill[] = {{a, 0, blocks_a, 1}, {b, 0, blocks_b, 2}};
    auto l = runner.run(prefill);
    out.insert(out.end(), l.begin(), l.end());
    const std::vector<int32_t> na = {11}, nb = {12};
    const engine::ModelRunner::Work decode[] = {{na, 7, blocks_a, 1}, {nb, 5, blocks_b, 1}};
    l = runner.run(decode);
    out.insert(out.end(), l.begin(), l.end());
    engine::SchedulerOutput evicting;
    evicting.copies.push_back({0, 3});
    evicting.moves.push_back({3, 5});
    engine::ScheduledSeq s;
    s.tokens = {17};
    s.start_pos = 8;
    s.rope_offset = 5;
    s.blocks = {3, 1};
    s.wants_logits = true;
    evicting.seqs.push_back(s);
    l = runner.execute(evicting);
    out.insert(out.end(), l.begin(), l.end());
    return out;
}

std::shared_ptr<kernels::Backend> backend(kernels::Activations a) {
    auto r = kernels::make_backend({.threads = 1, .activations = a});
    if (!r) throw std::runtime_error(r.error().message);
    return std::move(r).value();
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    float d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
}

// The split model's logits against the whole model's, both with activations `act`. In float
// (F32) the ranks compute the same products summed in another order, so only rounding tells
// them apart. With integer activations each rank rounds its own shorter activation rows to
// the grid, so the split may move a logit as far as that grid itself does (the whole model's
// distance from its float self), no further.
// `tp` ranks within each of `pp` stages (world rank = stage x tp + t), as ferry's --tp / --pp
// lay them out: a world group for the step messages, a tensor-parallel group per stage and a
// pipeline group per tensor-parallel index.
void expect_split_equals_whole(const std::string& dir, int tp, std::optional<DType> weights,
                               kernels::Activations act, int pp = 1) {
    auto whole = engine::LoadedModel::load(dir, false, backend(act), weights);
    ASSERT_TRUE(whole.ok()) << whole.error().message;
    engine::ModelRunner ref(*whole->model, whole->backend, 4, 8);
    const std::vector<float> want = three_steps(ref);
    float grid = 0;
    if (act != kernels::Activations::F32) {
        auto exact =
            engine::LoadedModel::load(dir, false, backend(kernels::Activations::F32), weights);
        ASSERT_TRUE(exact.ok());
        engine::ModelRunner f32(*exact->model, exact->backend, 4, 8);
        grid = max_diff(three_steps(f32), want);
    }

    const int n = tp * pp;
    LocalGroup world(n);
    std::vector<std::unique_ptr<LocalGroup>> tp_groups, pp_groups;
    for (int s = 0; tp > 1 && pp > 1 && s < pp; ++s)
        tp_groups.push_back(std::make_unique<LocalGroup>(tp));
    for (int t = 0; tp > 1 && pp > 1 && t < tp; ++t)
        pp_groups.push_back(std::make_unique<LocalGroup>(pp));
    std::vector<std::vector<float>> got(1);
    std::vector<std::string> errors(static_cast<size_t>(n));
    std::vector<std::thread> ranks;
    for (int r = 0; r < n; ++r)
        ranks.emplace_back([&, r] {
            const int stage = r / tp, t = r % tp;
            auto comm = std::make_shared<LocalGroup::Rank>(world, r);
            model::ParallelGroups groups{comm, nullptr, nullptr};
            if (tp > 1 && pp > 1) {
                groups.tp = std::make_shared<LocalGroup::Rank>(*tp_groups[size_t(stage)], t);
                groups.pp = std::make_shared<LocalGroup::Rank>(*pp_groups[size_t(t)], stage);
            } else {
                (pp > 1 ? groups.pp : groups.tp) = comm;
            }
            auto lm = engine::LoadedModel::load(dir, false, backend(act), weights, groups);
            if (!lm) {
                errors[static_cast<size_t>(r)] = lm.error().message;  // every rank fails alike
                return;
            }
            if (pp > 1) {
                EXPECT_LT(lm->model->kv_layers(), whole->model->kv_layers());
            }
            if (tp > 1) {
                const auto& c = lm->model->config();
                const auto& w = whole->model->config();
                EXPECT_LT(c.is_moe() ? c.n_ff_expert : c.n_ff, w.is_moe() ? w.n_ff_expert : w.n_ff);
            }
            if (r != 0) {
                const Status s = engine::ModelRunner::follow_steps(*lm->model, lm->backend);
                if (!s) errors[static_cast<size_t>(r)] = s.error().message;
                return;
            }
            {
                engine::ModelRunner runner(*lm->model, lm->backend, 4, 8);
                got[0] = three_steps(runner);
            }
            comm->finish();
        });
    for (auto& th : ranks) th.join();
    for (const auto& e : errors) ASSERT_EQ(e, "") << dir;
    ASSERT_EQ(got[0].size(), want.size());
    float max_abs = 0;
    for (float w : want) max_abs = std::max(max_abs, std::fabs(w));
    const float d = max_diff(want, got[0]);
    if (tp == 1) {  // the same computation, layer by layer, only on other ranks: bit for bit
        EXPECT_EQ(d, 0.0f) << dir << " pp " << pp;
        return;
    }
    EXPECT_LT(d, std::max(2e-5f * std::max(1.0f, max_abs), grid))
        << dir << " tp " << tp << " pp " << pp << " (the activation grid alone: " << grid << ")";
}

TEST(TensorParallel, SplitForwardEqualsTheWholeModel) {
    const std::string g = testing::golden_dir() + "/hf_models/";
    // Llama (8 heads over 2 KV heads), Qwen2's q/k/v biases, Qwen3's q/k norms, Gemma 3's
    // post-norms and sliding layers, Phi-3's fused q/k/v and gate/up.
    for (const char* name : {"llama", "qwen2", "qwen3", "gemma3", "phi3"})
        expect_split_equals_whole(g + name, 2, std::nullopt, kernels::Activations::F32);
    // Mixtures: each expert's columns (and Qwen2-MoE's shared expert's) over the ranks, the
    // router whole, the experts' shares summed across ranks before the residual.
    for (const char* name : {"mixtral", "qwen3_moe", "qwen2_moe"})
        expect_split_equals_whole(g + name, 2, std::nullopt, kernels::Activations::F32);
    // Quantized to q8_0 at load: the MLP's 160 columns are 5 blocks, 3 + 2.
    for (auto act : {kernels::Activations::F32, kernels::Activations::Int16})
        expect_split_equals_whole(g + "llama", 2, DType::Q8_0, act);
}

TEST(TensorParallel, DefaultModelSplitsUnevenlyOverThreeAndTwo) {
    // 9 heads over 3 KV heads: 3 ranks take one each, 2 ranks take 2 + 1.
    for (auto act : {kernels::Activations::F32, kernels::Activations::Int16})
        for (int tp : {2, 3})
            expect_split_equals_whole(testing::default_model_path(), tp, std::nullopt, act);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST(PipelineParallel, StagesGiveTheWholeModelsLogitsBitForBit) {
    // Two sequences a step: two micro-batches through the stages; a prefill then a decode.
    const std::string g = testing::golden_dir() + "/hf_models/";
    for (const char* name : {"llama", "gemma3", "qwen3_moe"})
        expect_split_equals_whole(g + name, 1, std::nullopt, kernels::Activations::Int16, 2);
    for (int pp : {2, 3})
        expect_split_equals_whole(testing::default_model_path(), 1, std::nullopt,
                                  kernels::Activations::Int16, pp);
}

TEST(PipelineParallel, StagesOfTensorParallelGroupsGiveTheWholeModelsLogits) {
    // 2 stages of 2 ranks: each stage's layers split Megatron's way, the residual stream handed
    // from each stage's rank t to the next stage's rank t, the last stage's logits gathered on
    // its rank 0 and sent to world rank 0.
    const std::string g = testing::golden_dir() + "/hf_models/";
    for (const char* name : {"llama", "qwen3_moe"})
        expect_split_equals_whole(g + name, 2, std::nullopt, kernels::Activations::F32, 2);
    expect_split_equals_whole(testing::default_model_path(), 2, std::nullopt,
                              kernels::Activations::F32, 3);
}

}  // namespace
}  // namespace ferry
