#include "engine/model_runner.h"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

#include "engine/kv_calibration.h"
#include "engine/step_message.h"

namespace ferry::engine {
namespace {

// The layers of this rank's cache (model::LlamaModel::kv_layers) that slide, in their own pool.
kv::KvWindowPool window_pool(const model::LlamaModel& model, int64_t n_blocks) {
    kv::KvWindowPool p;
    if (n_blocks <= 0) return p;
    p.n_blocks = n_blocks;
    for (int l = 0; l < model.kv_layers(); ++l)
        p.layers.push_back(model.config().window(model.first_layer() + l) > 0 ? 1 : 0);
    return p;
}

}  // namespace

ModelRunner::ModelRunner(const model::LlamaModel& model, std::shared_ptr<kernels::Backend> backend,
                         int64_t n_blocks, int block_size, kv::KvFormat kv, int64_t n_window_blocks)
    : model_(model),
      backend_(std::move(backend)),
      calibration_tokens_(kv.calibration_tokens),
      store_(*backend_, model.kv_layers(), n_blocks, block_size, model.config().kv_dim(),
             model.config().head_dim, std::move(kv), window_pool(model, n_window_blocks)) {
    if (backend_->device() != model.device())
        throw std::invalid_argument("ModelRunner: the model's weights are on another device");
    if (!model.comm()) return;
    if (leads_group()) {
        StepMessage m;
        m.kind = StepMessage::Kind::Setup;
        m.setup = {n_blocks, block_size, store_.dtype(), n_window_blocks, calibration_tokens_};
        encode_step(m, message_);
        model.comm()->broadcast(message_, false);
    }
}

bool ModelRunner::leads_group() const {
    return model_.comm() && model_.comm()->rank() == 0;
}

std::span<const float> ModelRunner::run(std::span<const Work> work) {
    return step({}, {}, {}, work);
}

void ModelRunner::Tap::observe_head(const Tensor& rows) {
    if (r->observer_) r->observer_->observe_head(rows);
    if (r->keep_hidden_)
        r->hidden_.insert(r->hidden_.end(), rows.data<const float>(),
                          rows.data<const float>() + rows.numel());
}

std::span<const float> ModelRunner::step(Copies copies, Copies window_copies,
                                         std::span<const std::pair<int32_t, int64_t>> moves,
                                         std::span<const Work> work) {
    // Every op of the step has run when it returns, or throws (Backend::synchronize).
    try {
        const std::span<const float> logits = run_step(copies, window_copies, moves, work);
        backend_->synchronize();
        return logits;
    } catch (...) {
        try {
            backend_->synchronize();
        } catch (...) {  // the step's own error is the one to report
        }
        throw;
    }
}

std::span<const float> ModelRunner::run_step(Copies copies, Copies window_copies,
                                             std::span<const std::pair<int32_t, int64_t>> moves,
                                             std::span<const Work> work) {
    // pick_next() arms this step only, whatever happens in it.
    const std::optional<Pick> pick = std::exchange(pick_, std::nullopt);
    ids_.clear();
    hidden_.clear();
    if (leads_group() &&
        (!copies.empty() || !window_copies.empty() || !moves.empty() || !work.empty())) {
        StepMessage m;
        m.copies.assign(copies.begin(), copies.end());
        m.window_copies.assign(window_copies.begin(), window_copies.end());
        m.moves.assign(moves.begin(), moves.end());
        for (const Work& w : work)
            m.work.push_back({{w.tokens.begin(), w.tokens.end()},
                              w.start_pos,
                              w.rope_offset,
                              {w.blocks.begin(), w.blocks.end()},
                              {w.window_blocks.begin(), w.window_blocks.end()},
                              w.n_logits,
                              {w.tree.begin(), w.tree.end()}});
        encode_step(m, message_);
        model_.comm()->broadcast(message_, false);
        last_sent_ = std::chrono::steady_clock::now();
    }
    if (!copies.empty()) store_.copy_blocks(copies);
    if (!window_copies.empty()) store_.copy_blocks(window_copies, true);
    if (!moves.empty()) {
        const kernels::KvCacheView view = store_.view();
        for (const auto& [block, delta] : moves) model_.move_keys(*backend_, view, block, delta);
    }
    mass_sum_at_.clear();  // a step without tokens leaves no mass behind
    int64_t n_tokens = 0, rows = 0;
    for (const Work& w : work)
        n_tokens += static_cast<int64_t>(w.tokens.size()), rows += w.n_logits;
    if (n_tokens == 0) return {};
    const int64_t n_vocab = model_.config().n_vocab;
    if (rows > 0 && (logits_.empty() || logits_.dim(0) < rows)) {
        const int64_t shape[] = {rows, n_vocab};
        logits_ = backend_->alloc(DType::F32, shape);
    }
    // A pipeline's stages work on micro-batches of consecutive sequences, so the first takes
    // the second micro-batch while the next stage runs the first. As many micro-batches as
    // stages: twice as many measured no faster here (2 stages on 2 cores, bench throughput),
    // the smaller products costing what the shorter bubble saves. Without a pipeline the step
    // is one batch.
    const int parts = model_.pipeline_stages();
    groups_.clear();
    Group g{0, 0, 0, 0};
    int64_t acc = 0;
    for (size_t i = 0; i < work.size(); ++i) {
        acc += static_cast<int64_t>(work[i].tokens.size());
        g.rows += work[i].n_logits;
        g.end = i + 1;
        const bool cut = acc * parts >= n_tokens * static_cast<int64_t>(groups_.size() + 1) &&
                         static_cast<int>(groups_.size()) < parts - 1;
        if (cut || g.end == work.size()) {
            groups_.push_back(g);
            g = {g.end, g.end, g.row0 + g.rows, 0};
        }
    }
    const auto group_logits = [&](const Group& gr) {
        return gr.rows > 0 ? logits_.slice(gr.row0, gr.rows) : Tensor();
    };
    // Attention mass: every asking item's rows laid out before the pass, so pointers stay put.
    const auto n_head = static_cast<size_t>(model_.config().n_head);
    mass_at_.assign(work.size(), kNoMass);
    mass_sum_at_.assign(work.size(), kNoMass);
    mass_blocks_.assign(work.size(), 0);
    size_t mass_floats = 0, sum_floats = 0;
    for (size_t i = 0; i < work.size(); ++i)
        if (work[i].attn_mass > 0) {
            mass_at_[i] = mass_floats;
            mass_sum_at_[i] = sum_floats;
            mass_blocks_[i] = work[i].blocks.size();
            mass_floats += work[i].tokens.size() * n_head * work[i].blocks.size();
            sum_floats += work[i].blocks.size();
        }
    mass_.assign(mass_floats, 0.0f);
    mass_sum_.assign(sum_floats, 0.0f);
    for (const Group& gr : groups_) {
        pack(work.subspan(gr.begin, gr.end - gr.begin), gr.begin);
        const kernels::Batch batch{tokens_, positions_, token_seq_, seqs_, logit_tokens_};
        model_.forward_stage(*backend_, batch, store_.view(), group_logits(gr),
                             observer_ || keep_hidden_ ? &tap_ : nullptr);
    }
    for (const Group& gr : groups_)
        model_.collect_logits(*backend_, group_logits(gr),
                              observer_ || keep_hidden_ ? &tap_ : nullptr);
    model_.end_step();
    for (size_t i = 0; i < work.size(); ++i) {
        if (mass_at_[i] == kNoMass) continue;
        // The real tokens' rows; a draft's (verified this step, perhaps rejected) do not count.
        const size_t nb = work[i].blocks.size();
        const size_t rows = static_cast<size_t>(work[i].attn_mass) * n_head;
        for (size_t r = 0; r < rows; ++r)
            for (size_t b = 0; b < nb; ++b)
                mass_sum_[mass_sum_at_[i] + b] += mass_[mass_at_[i] + r * nb + b];
    }
    if (rows == 0) return {};
    if (pick) {
        const auto& pick_rows = pick->rows;
        ids_.resize(static_cast<size_t>(rows));
        if (pick_rows.empty())
            backend_->argmax(logits_.slice(0, rows), ids_);
        else if (static_cast<int64_t>(pick_rows.size()) != rows)
            throw std::logic_error("ModelRunner: one sampling row for each logits row");
        else
            backend_->sample(logits_.slice(0, rows), pick_rows, pick->edits, pick->masks, ids_);
        // A token outside the vocabulary would read past the embedding or end a stream as if
        // nothing could follow: a device pick is checked before anyone uses it (-1 only where a
        // mask allowed nothing).
        for (size_t i = 0; i < ids_.size(); ++i) {
            const int32_t id = ids_[i];
            const bool none_allowed = id == -1 && !pick_rows.empty() && pick_rows[i].mask_at >= 0;
            if ((id < 0 || id >= n_vocab) && !none_allowed)
                throw std::runtime_error(fmt::format(
                    "the device picked token {}, outside the vocabulary (0..{})", id, n_vocab - 1));
        }
        return {};
    }
    const Tensor host = backend_->host_view(logits_.slice(0, rows));
    return {host.data<const float>(), static_cast<size_t>(rows * n_vocab)};
}

void ModelRunner::keep_group_alive(std::chrono::steady_clock::duration every) {
    const auto now = std::chrono::steady_clock::now();
    if (!leads_group() || now - last_sent_ < every) return;
    StepMessage m;
    m.kind = StepMessage::Kind::Keepalive;
    encode_step(m, message_);
    model_.comm()->broadcast(message_, false);
    last_sent_ = now;
}

std::span<const float> ModelRunner::attention_mass(size_t i) const {
    if (i >= mass_sum_at_.size() || mass_sum_at_[i] == kNoMass) return {};
    return {mass_sum_.data() + mass_sum_at_[i], mass_blocks_[i]};
}

void ModelRunner::pack(std::span<const Work> work, size_t first_item) {
    tokens_.clear();
    positions_.clear();
    token_seq_.clear();
    logit_tokens_.clear();
    seqs_.clear();
    for (const Work& w : work) {
        const auto first = static_cast<int32_t>(tokens_.size());
        const auto n = static_cast<int32_t>(w.tokens.size());
        tokens_.insert(tokens_.end(), w.tokens.begin(), w.tokens.end());
        for (int32_t i = 0; i < n; ++i) {
            positions_.push_back(w.start_pos + i);
            token_seq_.push_back(static_cast<int32_t>(seqs_.size()));
        }
        for (int32_t i = n - w.n_logits; i < n; ++i) logit_tokens_.push_back(first + i);
        const size_t item = first_item + seqs_.size();
        if (!w.tree.empty() && !kernels::valid_tree_masks(w.tree, w.tokens.size()))
            throw std::logic_error("ModelRunner: a tree needs one mask per token, each its own");
        seqs_.push_back({w.start_pos, n, first, w.blocks, w.rope_offset,
                         mass_at_[item] == kNoMass ? nullptr : mass_.data() + mass_at_[item],
                         w.window_blocks, w.tree});
    }
}

void ModelRunner::pick_next(std::span<const kernels::SampleRow> rows,
                            std::span<const kernels::LogitEdit> edits,
                            std::span<const uint64_t> masks) {
    pick_ = Pick{rows, edits, masks};
}

void ModelRunner::cancel_pick() {
    pick_.reset();
}

std::span<const float> ModelRunner::execute(const SchedulerOutput& out) {
    copies_.clear();
    for (const BlockCopy& c : out.copies) copies_.emplace_back(c.src, c.dst);
    window_copies_.clear();
    for (const BlockCopy& c : out.window_copies) window_copies_.emplace_back(c.src, c.dst);
    moves_.clear();
    for (const KeyMove& m : out.moves) moves_.emplace_back(m.block, m.delta);
    work_.clear();
    for (const ScheduledSeq& s : out.seqs)
        work_.push_back({s.tokens, s.start_pos, s.blocks, s.num_logits(), s.rope_offset,
                         s.attn_mass ? s.num_tokens() - s.num_draft : 0, s.window_blocks, s.tree});
    return step(copies_, window_copies_, moves_, work_);
}

void ModelRunner::move_slots(std::span<const int32_t> blocks,
                             std::span<const int32_t> window_blocks,
                             std::span<const std::pair<int64_t, int64_t>> moves) {
    if (leads_group()) {  // every rank holds a share of every slot's keys and values
        StepMessage m;
        m.slot_table.assign(blocks.begin(), blocks.end());
        m.slot_window_table.assign(window_blocks.begin(), window_blocks.end());
        for (const auto& [from, to] : moves) {
            m.slot_from.push_back(from);
            m.slot_to.push_back(to);
        }
        encode_step(m, message_);
        model_.comm()->broadcast(message_, false);
        last_sent_ = std::chrono::steady_clock::now();
    }
    kernels::BatchSeq s;
    s.blocks = blocks;
    s.window_blocks = window_blocks;
    backend_->kv_move_slots(store_.view(), s, moves);
}

Status ModelRunner::follow_steps(const model::LlamaModel& model,
                                 std::shared_ptr<kernels::Backend> backend) {
    comm::Communicator* comm = model.comm();
    if (!comm || comm->rank() == 0)
        return make_error("ModelRunner::follow_steps: not a following rank of a group");
    std::unique_ptr<ModelRunner> runner;
    std::vector<std::byte> bytes;
    std::vector<Work> work;
    bool keepalives = false;  // rank 0 says it is alive while idle: silence means it is gone
    try {
        for (;;) {
            comm->broadcast(bytes, !keepalives);
            if (bytes.empty()) return Status::Ok();  // rank 0 ended the group
            auto m = decode_step(bytes);
            if (!m) return m.error();
            if (m->kind == StepMessage::Kind::Keepalive) {
                keepalives = true;
                continue;
            }
            if (m->kind == StepMessage::Kind::Setup) {
                kv::KvFormat f{m->setup.kv_dtype, {}, m->setup.calibration_tokens};
                if (f.dtype == quant::KvDType::Int8) {
                    // The runner before this one ran the calibration text: this rank's keys.
                    const int n = f.calibration_tokens;
                    if (!runner || n <= 0 || runner->kv().block_size() != n ||
                        runner->kv().dtype() != quant::KvDType::F32)
                        return make_error("parallel group: int8 keys without a calibration run");
                    f.k_scales = key_scales_from(*runner, n);
                }
                runner.reset();  // a new cache replaces the old one, as on rank 0
                runner = std::make_unique<ModelRunner>(model, backend, m->setup.n_blocks,
                                                       m->setup.block_size, std::move(f),
                                                       m->setup.n_window_blocks);
                continue;
            }
            if (!runner) return make_error("parallel group: a step before the cache was made");
            if (!m->slot_from.empty()) {
                std::vector<std::pair<int64_t, int64_t>> slots;
                for (size_t i = 0; i < m->slot_from.size(); ++i)
                    slots.emplace_back(m->slot_from[i], m->slot_to[i]);
                runner->move_slots(m->slot_table, m->slot_window_table, slots);
            }
            work.clear();
            for (const StepWork& w : m->work)
                work.push_back({w.tokens, w.start_pos, w.blocks, w.n_logits, w.rope_offset, 0,
                                w.window_blocks, w.tree});
            runner->step(m->copies, m->window_copies, m->moves, work);
        }
    } catch (const comm::CommError& e) {
        return make_error("{}", e.what());
    }
}

}  // namespace ferry::engine
