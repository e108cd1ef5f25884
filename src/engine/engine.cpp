#include "engine/engine.h"

#include "engine/constraint.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "core/thread_pool.h"
#include "engine/kv_calibration.h"
#include "engine/kv_pool_size.h"
#include "engine/lookahead_proposer.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"

namespace ferry::engine {

struct Engine::Live {
    std::unique_ptr<Request> request;
    std::vector<std::unique_ptr<Sequence>> seqs;
};

namespace {

double seconds(Clock::duration d) {
    return std::chrono::duration<double>(d).count();
}

}  // namespace

Engine::Engine(const LoadedModel& model, EngineConfig config) : model_(model), config_(config) {
    const auto& c = model.model->config();
    if (config_.block_size <= 0) config_.block_size = 16;
    config_.max_num_seqs = std::max(1, config_.max_num_seqs);
    config_.max_num_batched_tokens = std::max(1, config_.max_num_batched_tokens);
    max_model_len_ =
        config_.max_model_len > 0 ? config_.max_model_len : std::min(c.n_ctx_train, 4096);
    int64_t bytes = config_.kv_cache_memory;
    if (bytes <= 0) bytes = default_pool_bytes();
    const bool paged = config_.kv_layout == EngineConfig::KvLayout::Paged;
    const int model_window_layers = c.window_layers(0, c.n_layer);
    auto per_block = static_cast<int64_t>(kv_bytes_per_block());
    if (paged && config_.kv_window_pool && model_window_layers > 0 &&
        model_window_layers < c.n_layer) {
        // Enough for every seat's window, its partly filled blocks at both ends and a step's
        // chunk, so the window pool never binds before the other: at most as many blocks as
        // the other gets, when memory is too short for that.
        const int bs = config_.block_size;
        const int64_t worst =
            int64_t{config_.max_num_seqs} * ((c.sliding_window + bs - 1) / bs + 2) +
            (config_.max_num_batched_tokens + bs - 1) / bs;
        // What a block of each pool costs here. A pipeline stage may hold layers of one kind
        // only; its pools are still sized as the model's, in proportion to its share of layers.
        const int here = rank_window_layers();
        auto w = static_cast<int64_t>(kv_bytes_per_block_of(here));
        per_block = static_cast<int64_t>(kv_bytes_per_block_of(model.model->kv_layers() - here));
        if (w == 0 || per_block == 0) {
            const double share = double(model.model->kv_layers()) / c.n_layer;
            w = static_cast<int64_t>(share * double(kv_bytes_per_block_of(model_window_layers)));
            per_block = static_cast<int64_t>(
                share * double(kv_bytes_per_block_of(c.n_layer - model_window_layers)));
        }
        n_window_blocks_ = std::max<int64_t>(1, std::min(worst, bytes / (per_block + w)));
        bytes -= n_window_blocks_ * w;
    }
    n_blocks_ = std::max<int64_t>(1, bytes / per_block);
    // A sequence longer than the whole pool could never finish: admitted, it would be
    // preempted and recomputed forever; waiting, it would hold up the queue behind it. So
    // the pool bounds the context, and a request that asks for more is refused or cut short
    // like one that asks for more than the model's context. A model whose every layer slides
    // holds only its window and a step's chunk (paged: the rest goes back), so any context
    // fits a pool that holds those.
    const int64_t pool_tokens = n_blocks_ * config_.block_size;
    const bool window_only =
        c.all_layers_slide() && config_.kv_layout == EngineConfig::KvLayout::Paged &&
        pool_tokens >= c.sliding_window + config_.max_num_batched_tokens + 2 * config_.block_size;
    if (pool_tokens < max_model_len_ && !window_only) {
        context_before_kv_cap_ = max_model_len_;
        max_model_len_ = static_cast<int>(pool_tokens);
    }
    // A model whose every layer slides (Mistral, Phi-3) never reads a position again once it is
    // out of the window, so its blocks go back to the pool (Gemma's global layers keep them).
    // A model with both kinds of layer gives back the window pool's blocks instead.
    scheduler_ = std::make_unique<Scheduler>(
        config_, max_model_len_, n_blocks_,
        c.all_layers_slide() || n_window_blocks_ > 0 ? c.sliding_window : 0, n_window_blocks_);
    runner_ =
        std::make_unique<ModelRunner>(*model.model, model.backend, n_blocks_, config_.block_size,
                                      kv_format_for(model, config_.kv_dtype), n_window_blocks_);
    tree_window_ = model.model->config().smallest_window();
    ngram_ = std::make_unique<NgramProposer>(config_.spec.ngram_min, config_.spec.ngram_max,
                                             config_.spec.ngram_tree);
    lookahead_ = std::make_unique<LookaheadProposer>(config_.spec.ngram_min, config_.spec.ngram_max,
                                                     config_.spec.lookahead_n);
    planner_ = SpecPlanner(config_.max_num_batched_tokens + 1);
    config_.spec.k = std::max(1, config_.spec.k);
    metrics_.kv_blocks_total = n_blocks_;
    metrics_.kv_window_blocks_total = n_window_blocks_;
    metrics_.block_size = config_.block_size;
    metrics_.kv_pool_bytes = static_cast<uint64_t>(n_blocks_) * kv_bytes_per_block() +
                             static_cast<uint64_t>(n_window_blocks_) * kv_window_bytes_per_block();
    metrics_.device = kernels::backend_property(*model.backend, "backend");
    metrics_.device_memory_total = model.backend->memory_bytes();
}

Expected<std::unique_ptr<Engine>> Engine::create(const LoadedModel& model, EngineConfig config) {
    if (!config.draft_model && config.spec.method == SpecMethod::Draft)
        return make_error("--spec draft needs a draft model (--draft-model)");
    // Before the engine is made (int8 keys calibrate there): what does not depend on its pool.
    if (auto s = check_eviction(model, config, std::numeric_limits<int64_t>::max(), ""); !s)
        return s.error();
    if (config.gpu_memory_utilization) {
        if (model.backend->device() == Device::CPU)
            return make_error(
                "--gpu-memory-utilization sizes a GPU's KV pool; on the CPU give the pool's "
                "bytes with --kv-cache-memory");
        if (config.kv_cache_memory > 0)
            return make_error(
                "give --kv-cache-memory or --gpu-memory-utilization, not both: each sizes the KV "
                "pool");
    }
    std::unique_ptr<Engine> e(new Engine(model, std::move(config)));
    if (!e->pool_error_.empty()) return make_error("{}", e->pool_error_);
    if (auto s = check_eviction(
            model, e->config_, e->max_model_len_,
            e->context_before_kv_cap_ ? "the KV cache (--kv-cache-memory)" : "the context");
        !s)
        return s.error();
    if (auto s = e->attach_draft(); !s) return s.error();
    if (auto s = e->attach_medusa(); !s) return s.error();
    return e;
}

int64_t Engine::context_len(const Sequence& s) const {
    const auto n = static_cast<int64_t>(s.tokens.size());
    return config_.kv_eviction.past_context() ? n - s.kv.evicted : n;
}

Status Engine::check_eviction(const LoadedModel& model, const EngineConfig& config, int64_t context,
                              const char* context_name) {
    const KvEvictionConfig& ev = config.kv_eviction;
    if (!ev.on()) return Status::Ok();
    const char* what = kv_eviction_name(ev.kind);
    if (config.kv_layout != EngineConfig::KvLayout::Paged)
        return make_error("--kv-eviction {} gives back blocks: it needs the paged KV cache", what);
    if (config.draft_model || config.spec.method == SpecMethod::Draft)
        return make_error(
            "--kv-eviction {} with a draft model is not supported (the draft's cache would "
            "still grow with the sequence); use --spec ngram or none",
            what);
    return check_kv_eviction(ev, config.kv_dtype, model.model->config().sliding_window > 0,
                             config.block_size, config.max_num_batched_tokens,
                             "lower --max-num-batched-tokens, or raise --ctx", context,
                             context_name);
}

Status Engine::attach_draft() {
    if (!config_.draft_model) return Status::Ok();
    // The draft's cache holds as many tokens as the target's.
    SpecConfig dc = config_.spec;
    dc.method = SpecMethod::Draft;
    auto p = make_proposer(dc, model_, config_.draft_model, n_blocks_ * config_.block_size,
                           config_.kv_dtype);
    if (!p) return p.error();
    draft_ = std::move(*p);
    return Status::Ok();
}

Status Engine::attach_medusa() {
    if (config_.spec.medusa_heads.empty() && config_.spec.method != SpecMethod::Medusa)
        return Status::Ok();
    SpecConfig mc = config_.spec;
    mc.method = SpecMethod::Medusa;
    auto p = make_proposer(mc, model_, nullptr, 0);
    if (!p) return p.error();
    medusa_ = std::move(*p);
    runner_->set_keep_hidden(true);
    return Status::Ok();
}

Engine::~Engine() {
    stop();
    abort_all();
    drain_inbox();
}

int64_t Engine::default_pool_bytes() {
    const kernels::Backend& be = *model_.backend;
    if (be.device() == Device::CPU) return cpu_pool_bytes(be.memory_free_bytes());
    // A step's worth of cache at least: fewer blocks than one step's tokens and the scheduler
    // could not run a prompt's first chunk.
    const int64_t step_tokens = std::min(max_model_len_, config_.max_num_batched_tokens);
    const int64_t blocks = (step_tokens + config_.block_size - 1) / config_.block_size;
    const uint64_t needed = static_cast<uint64_t>(blocks) * kv_bytes_per_block();
    // Every token of a step may want its row of logits (prompt logprobs, a long draft), so the
    // logits are sized for the whole step: on a large vocabulary a GiB the cache does not get,
    // rather than a step that runs out of memory after the pool took the rest.
    const uint64_t workspace = step_workspace_bytes(
        model_.model->config(), config_.max_num_batched_tokens, config_.max_num_batched_tokens);
    auto pool = gpu_pool_bytes(
        {kernels::backend_property(be, "device"), be.memory_bytes(), be.memory_free_bytes()},
        config_.gpu_memory_utilization.value_or(0.9), workspace, needed);
    if (!pool) {
        pool_error_ = pool.error().message;
        return static_cast<int64_t>(kv_bytes_per_block());  // one block until create refuses
    }
    return *pool;
}

size_t Engine::kv_bytes_per_block_of(int n_layers) const {
    const auto& c = model_.model->config();
    return kv::KvStore::bytes_per_block(n_layers, config_.block_size, c.kv_dim(), c.head_dim,
                                        config_.kv_dtype);
}

size_t Engine::kv_bytes_per_block() const {
    return kv_bytes_per_block_of(model_.model->kv_layers() - window_layers());
}

size_t Engine::kv_window_bytes_per_block() const {
    return kv_bytes_per_block_of(window_layers());
}

int Engine::rank_window_layers() const {
    const int first = model_.model->first_layer();
    return model_.model->config().window_layers(first, first + model_.model->kv_layers());
}

int Engine::window_layers() const {
    return n_window_blocks_ > 0 ? rank_window_layers() : 0;
}

std::optional<std::string> Engine::failure() const {
    const comm::Communicator* group = model_.model->comm();
    return group ? group->failure() : std::nullopt;
}

Expected<RequestId> Engine::add_request(std::vector<int32_t> prompt, RequestParams params,
                                        TokenCallback on_token) {
    if (auto why = failure()) return make_error(ErrorCode::Down, "{}", *why);
    const int n_vocab = model_.model->config().n_vocab;
    if (prompt.empty()) return make_error("the prompt is empty");
    for (int32_t t : prompt)
        if (t < 0 || t >= n_vocab)
            return make_error("token id {} is outside the vocabulary (0..{})", t, n_vocab - 1);
    // With eviction the cache never holds the whole prompt: any length runs. A scoring request
    // (max_tokens 0, an lm-eval window) generates nothing, so a whole context of prompt fits.
    const int64_t fits = params.max_tokens == 0 ? max_model_len_ : max_model_len_ - 1;
    if (static_cast<int64_t>(prompt.size()) > fits && !config_.kv_eviction.past_context())
        return make_error(
            "the prompt is {} tokens, but {} holds {} tokens; at most {} prompt tokens fit "
            "with room for one generated token",
            prompt.size(),
            context_before_kv_cap_ ? "the KV cache (--kv-cache-memory)" : "this model's context",
            max_model_len_, max_model_len_ - 1);
    // The pool holds max_model_len_ tokens at least (the constructor caps the context to it),
    // so a prompt that passed the check above fits the pool with its first generated token.
    if (params.n < 1 || params.n > 128) return make_error("n must be between 1 and 128");
    if (params.max_tokens < 0) return make_error("max_tokens must not be negative");
    if (params.prompt_logprobs > 20) return make_error("prompt_logprobs must be at most 20");
    if (params.top_logprobs > 20) return make_error("top_logprobs must be at most 20");
    if (params.spec == SpecMethod::Draft && !draft_)
        return make_error("speculation 'draft' needs a server started with --draft-model");
    if (params.spec == SpecMethod::Medusa && !medusa_)
        return make_error("speculation 'medusa' needs a server started with --medusa-heads");
    if (queued_.load() >= config_.max_waiting)
        return make_error(ErrorCode::Unavailable, "queue full: {} requests are waiting",
                          queued_.load());

    auto live = std::make_unique<Live>();
    live->request = std::make_unique<Request>();
    Request& r = *live->request;
    r.id = next_id_.fetch_add(1);
    r.params = std::move(params);
    r.on_token = std::move(on_token);
    r.prompt = std::move(prompt);
    r.arrival_time = Clock::now();
    const RequestId id = r.id;
    {
        std::lock_guard lock(inbox_mu_);
        pending_adds_.push_back(std::move(live));
        ++queued_;
        ++active_;
    }
    cv_.notify_one();
    return id;
}

void Engine::abort(RequestId id) {
    {
        std::lock_guard lock(inbox_mu_);
        pending_aborts_.push_back(id);
    }
    cv_.notify_one();
}

// live_ belongs to the engine thread (ThreadSanitizer caught a server shutdown reading it from
// the I/O thread): the request is left in the inbox, and the next drain aborts everything.
void Engine::abort_all() {
    {
        std::lock_guard lock(inbox_mu_);
        abort_all_ = true;
    }
    cv_.notify_one();
}

bool Engine::has_work() const {
    std::lock_guard lock(inbox_mu_);
    return active_.load() > 0 || !pending_adds_.empty() || !pending_aborts_.empty() || abort_all_;
}

void Engine::drain_inbox() {
    std::vector<std::unique_ptr<Live>> adds;
    std::vector<RequestId> aborts;
    bool all = false;
    {
        std::lock_guard lock(inbox_mu_);
        adds.swap(pending_adds_);
        aborts.swap(pending_aborts_);
        all = std::exchange(abort_all_, false);
    }
    for (auto& live : adds) {
        Request& r = *live->request;
        r.arrival = next_arrival_++;
        auto seq = std::make_unique<Sequence>();
        seq->id = next_seq_++;
        seq->request = &r;
        seq->tokens = r.prompt;
        seq->prompt_len = static_cast<int>(r.prompt.size());
        SamplingParams sp = r.params.sampling;
        seq->sampler = std::make_unique<Sampler>(sp);
        if (r.params.grammar && r.params.grammar_trigger.empty())
            seq->matcher = std::make_unique<grammar::Matcher>(r.params.grammar);
        seq->awaiting_trigger = r.params.grammar && !r.params.grammar_trigger.empty();
        if (r.params.prompt_logprobs >= 0 && r.prompt.size() == 1)  // nothing before it to score
            r.prompt_lp_done = std::make_shared<const PromptLogprobs>();
        seq->text =
            std::make_unique<StopText>(*model_.tokenizer, r.params.stop, r.params.include_stop_str);
        seq->spec = r.params.spec.value_or(config_.spec.method);
        scheduler_->add(seq.get());
        live->seqs.push_back(std::move(seq));
        const RequestId id = r.id;
        live_.emplace(id, std::move(live));
    }
    if (all)
        for (const auto& [id, live] : live_) aborts.push_back(id);
    for (RequestId id : aborts) abort_now(id);
    fail_pending();
    retire_finished();
}

int Engine::step_token_limit(Clock::time_point now) const {
    if (config_.max_tpot_ms <= 0) return 0;
    std::vector<TpotProgress> decoding;
    for (const Sequence* s : scheduler_->running()) {
        const Request& r = *s->request;
        if (s->num_uncomputed() != 1 || s->output_len() < 1 ||
            r.first_token_time == Clock::time_point{})
            continue;
        decoding.push_back({s->output_len(), seconds(now - r.first_token_time)});
    }
    const double allowed = step_time_allowance(config_.max_tpot_ms * 1e-3, decoding);
    const auto n = planner_.cost().max_tokens_within(allowed, config_.max_num_batched_tokens);
    return n ? static_cast<int>(std::max<int64_t>(*n, 1)) : 0;  // unmeasured: the fixed chunk
}

void Engine::abort_now(RequestId id) {
    auto it = live_.find(id);
    if (it == live_.end()) return;
    for (auto& seq : it->second->seqs)
        if (seq->status != SeqStatus::Finished) finish(*seq, FinishReason::Abort, nullptr);
}

bool Engine::step() {
    drain_inbox();
    propose_drafts();
    const auto now = Clock::now();
    SchedulerOutput out = scheduler_->schedule(now, step_token_limit(now));
    if (out.empty()) {
        publish_metrics();
        return false;
    }
    // The step's sequences, by the ids the plain output names them with.
    std::vector<Sequence*> seqs;
    for (const auto& s : out.seqs) seqs.push_back(scheduler_->sequence(s.seq_id));
    for (Sequence* seq : seqs) {
        Request& r = *seq->request;
        if (!r.started) {
            r.started = true;
            r.scheduled_time = now;
            --queued_;
        }
    }
    // The step's cost, for the speculation plan: the pass and the verifications and draws after
    // it, everything that grows with the tokens a step carries.
    const auto t_exec = Clock::now();
    // Where every row wants only a token, the device picks them and only ids come back
    // (ModelRunner::pick_next); otherwise the rows' logits.
    std::span<const float> logits;
    std::span<const int32_t> ids;
    PickPath path = pick_path(out, seqs);
    if (path == PickPath::Draw && !prepare_draws(out, seqs)) path = PickPath::Logits;
    const bool ids_only = path != PickPath::Logits;
    if (path == PickPath::Draw) {
        runner_->pick_next(pick_rows_, pick_edits_, pick_masks_);
    } else if (path == PickPath::Argmax) {
        runner_->pick_next();
    }
    if (ids_only) {
        try {
            runner_->execute(out);
        } catch (...) {
            runner_->cancel_pick();  // execute can throw before its step disarms it
            throw;
        }
        ids = runner_->picked();
    } else {
        logits = runner_->execute(out);
    }
    // Draft tokens count as computed only once verified.
    for (size_t i = 0; i < seqs.size(); ++i) {
        scheduler_->add_attention_mass(seqs[i], runner_->attention_mass(i));
        scheduler_->on_computed(seqs[i], out.seqs[i].num_tokens() - out.seqs[i].num_draft);
    }

    const int n_vocab = runner_->n_vocab();
    size_t row = 0;
    std::vector<Sequence*> targets;
    struct Pick {
        Sequence* seq;
        const float* logits;  // null where the device picked the token
        int32_t token = -1;
        std::string error;  // the draw threw
    };
    std::vector<Pick> picks;
    for (size_t i = 0; i < seqs.size(); ++i) {
        const ScheduledSeq& s = out.seqs[i];
        Sequence* seq = seqs[i];
        const int rows = s.num_logits();
        if (rows == 0) continue;
        const size_t first_row = row + static_cast<size_t>(rows - 1 - s.num_draft);
        const float* base = ids_only ? nullptr : logits.data() + row * n_vocab;
        const int32_t picked = ids_only ? ids[first_row] : -1;
        row += static_cast<size_t>(rows);
        Request& r = *seq->request;
        if (r.aborted || seq->status == SeqStatus::Finished) continue;
        const float* l =
            base ? base + static_cast<size_t>(rows - 1 - s.num_draft) * n_vocab : nullptr;
        try {
            if (s.all_logits) record_prompt_logprobs(r, s, base);
            if (!s.wants_logits) continue;
            if (s.num_draft > 0) {
                verify_and_emit(*seq, l, first_row);
                continue;
            }
            targets.assign(1, seq);
            if (!r.forked && r.params.n > 1) fork(r, *seq, targets);
            // Medusa's heads read the hidden state of the row that gave the next token.
            if (const auto h = runner_->hidden_row(first_row); medusa_ && !h.empty())
                for (Sequence* t : targets)
                    if (t->spec == SpecMethod::Medusa) medusa_->observe_hidden(t->id, h);
        } catch (const std::exception& e) {
            fail(r, e.what());
            continue;
        }
        for (Sequence* t : targets) {
            if (r.params.max_tokens == 0)  // scoring only: the prompt has run, nothing follows
                finish(*t, FinishReason::Length, nullptr);
            else
                picks.push_back({t, l, picked, {}});
        }
    }
    // A draw reads only its own sequence's logits, history and generator, so a batch's draws
    // run over the pool (64 greedy picks over 49152 logits held the other core idle); tokens
    // are then emitted in batch order on this thread, as streams and stops expect.
    // A constrained sequence draws from its grammar's allowed tokens; the mask is computed
    // here, beside the other draws, and shared by every sequence in the same grammar state.
    auto draw_one = [&](Pick& p) {
        if (!p.logits) return;  // the device's pick
        if (p.seq->matcher && p.seq->sampler->plain_greedy()) {
            p.token = masked_argmax(*p.seq->matcher->mask(), p.logits, n_vocab);
            return;  // -1: nothing can follow, the output ends here
        }
        if (p.seq->matcher) {
            thread_local std::vector<float> masked;
            if (!mask_logits(*p.seq->matcher->mask(), p.logits, n_vocab, masked)) {
                p.token = -1;  // nothing can follow: the output ends here
                return;
            }
            p.token = p.seq->sampler->sample(masked, p.seq->tokens);
            return;
        }
        p.token = p.seq->sampler->sample({p.logits, size_t(n_vocab)}, p.seq->tokens);
    };
    auto draw = [&](int64_t i) {
        Pick& p = picks[i];
        try {
            draw_one(p);
        } catch (const std::exception& e) {
            p.error = e.what();
        } catch (...) {
            p.error = "unknown exception";
        }
    };
    if (picks.size() >= 4) {
        runner_->backend().host_pool().run_tasks(static_cast<int64_t>(picks.size()), draw);
    } else {
        for (size_t i = 0; i < picks.size(); ++i) draw(static_cast<int64_t>(i));
    }
    for (const Pick& p : picks) {
        if (p.seq->status == SeqStatus::Finished) continue;
        Request& r = *p.seq->request;
        if (!p.error.empty()) {
            fail(r, p.error);
            continue;
        }
        try {
            if (p.token < 0)
                finish(*p.seq, FinishReason::Stop, nullptr);
            else
                emit(*p.seq, p.token, p.logits);
        } catch (const std::exception& e) {
            fail(r, e.what());
        }
    }
    fail_pending();
    planner_.record_step(out.total_tokens,
                         std::chrono::duration<double>(Clock::now() - t_exec).count());
    {
        std::lock_guard lock(metrics_mu_);
        ++metrics_.steps;
        metrics_.id_steps += ids_only;
        metrics_.batched_tokens_total += out.total_tokens;
        metrics_.batched_seqs_total += out.seqs.size();
    }
    retire_finished();
    publish_metrics();
    return true;
}

Engine::PickPath Engine::pick_path(const SchedulerOutput& out,
                                   std::span<Sequence* const> seqs) const {
    const Device device = runner_->backend().device();
    bool any = false, all_argmax = true;
    for (size_t i = 0; i < seqs.size(); ++i) {
        const ScheduledSeq& s = out.seqs[i];
        if (s.num_logits() == 0) continue;
        const Sequence& seq = *seqs[i];
        const Request& r = *seq.request;
        const RequestParams& p = r.params;
        // Anything that reads a row's floats: prompt logprobs, a draft's verification, logprobs,
        // scoring a prompt, n > 1's first token (every copy draws from it).
        if (s.all_logits || s.num_draft > 0 || p.top_logprobs >= 0 || !seq.sampler ||
            p.max_tokens == 0 || (p.n > 1 && !r.forked && !seq.sampler->plain_greedy()))
            return PickPath::Logits;
        // A grammar's mask goes with the draw (Backend::sample), not with the argmax.
        const bool argmax_only = seq.sampler->plain_greedy() && !seq.matcher;
        if (!picks_on_device(config_.sample_on, device, argmax_only)) return PickPath::Logits;
        all_argmax = all_argmax && argmax_only;
        any = true;
    }
    if (!any) return PickPath::Logits;
    return all_argmax ? PickPath::Argmax : PickPath::Draw;
}

bool Engine::prepare_draws(const SchedulerOutput& out, std::span<Sequence* const> seqs) {
    const auto words = static_cast<size_t>(kernels::mask_words(runner_->n_vocab()));
    // The constrained rows' allowed tokens first (over the pool, as the logits path computes
    // them beside its draws), so a grammar that fails leaves every generator where it was.
    std::vector<Sequence*> constrained;
    for (size_t i = 0; i < seqs.size(); ++i)
        if (out.seqs[i].num_logits() > 0 && seqs[i]->matcher) constrained.push_back(seqs[i]);
    pick_masks_.assign(constrained.size() * words, 0);
    std::atomic<bool> mask_failed{false};
    auto mask_one = [&](int64_t j) {
        try {
            const auto m = constrained[static_cast<size_t>(j)]->matcher->mask();
            std::copy_n(m->bits.begin(), std::min(words, m->bits.size()),
                        pick_masks_.begin() + static_cast<std::ptrdiff_t>(size_t(j) * words));
        } catch (...) {
            mask_failed = true;
        }
    };
    if (constrained.size() >= 2)
        runner_->backend().host_pool().run_tasks(static_cast<int64_t>(constrained.size()),
                                                 mask_one);
    else if (!constrained.empty())
        mask_one(0);
    if (mask_failed) return false;
    // One row for each sequence that wants a token, its number from its own generator.
    pick_rows_.clear();
    pick_edits_.clear();
    size_t masks = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
        if (out.seqs[i].num_logits() == 0) continue;
        pick_rows_.push_back(seqs[i]->sampler->device_row(seqs[i]->tokens, pick_edits_));
        if (seqs[i]->matcher) pick_rows_.back().mask_at = static_cast<int32_t>(words * masks++);
    }
    return true;
}

void Engine::fork(Request& req, Sequence& parent, std::vector<Sequence*>& out) {
    Live& live = *live_.at(req.id);
    req.forked = true;
    for (int i = 1; i < req.params.n; ++i) {
        auto child = std::make_unique<Sequence>();
        child->id = next_seq_++;
        child->request = &req;
        child->index = i;
        child->tokens = parent.tokens;
        child->prompt_len = parent.prompt_len;
        SamplingParams sp = req.params.sampling;
        sp.seed += static_cast<uint64_t>(i);  // distinct but reproducible samples
        child->sampler = std::make_unique<Sampler>(sp);
        if (parent.matcher) child->matcher = std::make_unique<grammar::Matcher>(*parent.matcher);
        child->awaiting_trigger = parent.awaiting_trigger;
        child->trigger_window = parent.trigger_window;
        child->text = std::make_unique<StopText>(*model_.tokenizer, req.params.stop,
                                                 req.params.include_stop_str);
        child->spec = parent.spec;
        child->spec_acceptance = parent.spec_acceptance;
        scheduler_->share_blocks(parent, *child);
        scheduler_->add_running(child.get());
        out.push_back(child.get());
        live.seqs.push_back(std::move(child));
        ++req.unfinished;
    }
}

// Prompt token p + 1's log-probability from the logits at position p, for each position of the
// chunk not recorded before (a preempted prompt runs again; its first pass already counted).
void Engine::record_prompt_logprobs(Request& r, const ScheduledSeq& s, const float* rows) {
    const int n_vocab = runner_->n_vocab();
    const int prompt_len = static_cast<int>(r.prompt.size());
    const int64_t start = s.start_pos + s.rope_offset;  // in the prompt (eviction moves the cache)
    const int64_t first = static_cast<int64_t>(r.prompt_lp.size()) - start;
    const int64_t last = std::min<int64_t>(s.num_tokens(), prompt_len - 1 - start);
    if (first < 0 || first >= last) return;  // a gap cannot happen: chunks run in order
    const size_t at = r.prompt_lp.size();
    r.prompt_lp.resize(at + static_cast<size_t>(last - first));
    const int top_n = r.params.prompt_logprobs;
    auto one = [&](int64_t k) {
        const int64_t j = first + k;
        const float* l = rows + static_cast<size_t>(j) * n_vocab;
        const int32_t tok = r.prompt[static_cast<size_t>(start + j + 1)];
        PromptLogprob& e = r.prompt_lp[at + static_cast<size_t>(k)];
        e.logprob = token_logprobs({l, static_cast<size_t>(n_vocab)}, tok, top_n,
                                   top_n > 0 ? &e.top : nullptr);
        int rank = 1;
        for (int v = 0; v < n_vocab; ++v) rank += l[v] > l[tok];
        e.rank = rank;
    };
    const int64_t n = last - first;
    if (n >= 4)
        runner_->backend().host_pool().run_tasks(n, one);
    else
        for (int64_t k = 0; k < n; ++k) one(k);
    if (static_cast<int>(r.prompt_lp.size()) == prompt_len - 1)
        r.prompt_lp_done = std::make_shared<const PromptLogprobs>(r.prompt_lp);
}

// Drafts for the sequences about to decode, as many tokens each as the policy says pay: the
// cost policy weighs what the step would cost with them against the tokens they are expected to
// add (engine/spec_planner.h), so a big batch on a busy CPU drafts nothing.
void Engine::propose_drafts() {
    int decoding = 0;
    int64_t prefill = 0;
    for (Sequence* s : scheduler_->running()) {
        s->draft.clear();
        if (s->num_uncomputed() == 1)
            ++decoding;
        else
            prefill += s->num_uncomputed();
    }
    // The step without drafts, as the scheduler will cut it.
    if (decoding > 0 && config_.prefill_chunk_while_decoding > 0)
        prefill = std::min<int64_t>(prefill, config_.prefill_chunk_while_decoding);
    const int64_t base_tokens =
        std::min<int64_t>(decoding + prefill, config_.max_num_batched_tokens);
    const SpecConfig& sc = config_.spec;
    if (sc.disable_batch > 0 && decoding > sc.disable_batch) return;
    struct Want {
        Sequence* seq;
        int k;
    };
    std::vector<Want> want;
    for (Sequence* s : scheduler_->running()) {
        if (s->spec == SpecMethod::Off || s->num_uncomputed() != 1 || s->request->aborted) continue;
        if (s->spec == SpecMethod::Draft && !draft_) continue;
        if (s->spec == SpecMethod::Medusa && !medusa_) continue;
        // A lazy constraint could start in the middle of a draft, past tokens it forbids.
        if (s->awaiting_trigger) continue;
        const RequestParams& p = s->request->params;
        // Never draft past what may still be emitted or past the context.
        const int64_t room = std::min<int64_t>(p.max_tokens - s->output_len() - 1,
                                               max_model_len_ - context_len(*s) - 1);
        int k = static_cast<int>(std::min<int64_t>(sc.k, room));
        if (s->spec == SpecMethod::Medusa)  // a tree's budget is its own
            k = static_cast<int>(
                std::min<int64_t>(medusa_->own_budget() ? room : k, medusa_->max_draft()));
        if (k > 0) want.push_back({s, k});
    }
    if (want.empty()) return;
    // Under streaming eviction a sequence never ends: prompt lookup searches what its cache
    // holds at most (the budget), not everything it ever saw.
    const size_t look_back = config_.kv_eviction.past_context()
                                 ? static_cast<size_t>(config_.kv_eviction.budget)
                                 : std::numeric_limits<size_t>::max();
    auto job = [look_back](Sequence* s, int k) {
        std::span<const int32_t> t = s->tokens;
        if (t.size() > look_back) t = t.last(look_back);
        const auto start = static_cast<int64_t>(s->tokens.size() - t.size());
        return ProposalJob{s->id, t, start, k, s->sampler.get(), &s->draft};
    };
    // Prompt lookup and lookahead cost nothing: they draft the most now and the plan trims.
    auto lookup = [](SpecMethod m) { return m == SpecMethod::Ngram || m == SpecMethod::Lookahead; };
    std::vector<ProposalJob> jobs;
    for (SpecMethod m : {SpecMethod::Ngram, SpecMethod::Lookahead}) {
        jobs.clear();
        for (const Want& w : want)
            if (w.seq->spec == m) jobs.push_back(job(w.seq, w.k));
        if (jobs.empty()) continue;
        (m == SpecMethod::Ngram ? ngram_ : lookahead_)->propose(jobs);
        for (const Want& w : want)
            if (w.seq->spec == m) fit_draft(*w.seq);
    }
    if (sc.policy == SpecPolicy::Cost) {
        std::vector<DraftCandidate> cands;
        for (const Want& w : want) {
            const bool cheap = lookup(w.seq->spec);
            const Draft& d = w.seq->draft;
            cands.push_back({planner_.acceptance(w.seq->spec_acceptance, d.accept),
                             cheap ? static_cast<int>(d.tokens.size()) : w.k,
                             cheap ? 0.0 : planner_.draft_seconds_per_token()});
        }
        // A step's prefill tokens are work it does, not overhead: a draft token must pay at the
        // rate of the step's every token, or a prefill-heavy step would make any draft look cheap.
        const DraftPlan plan = planner_.plan(cands, base_tokens, static_cast<double>(base_tokens));
        for (size_t i = 0; i < want.size(); ++i) {
            Sequence& s = *want[i].seq;
            Draft& d = s.draft;
            if (!lookup(s.spec)) {
                want[i].k = plan.k[i];
                continue;
            }
            if (plan.k[i] == 0 && !d.tokens.empty() && !s.spec_shadow.active())
                s.spec_shadow.start(d.chain_tokens());
            d.cut(static_cast<size_t>(plan.k[i]));
            if (!d.tokens.empty()) s.spec_shadow.clear();  // a real verification judges it
        }
        std::lock_guard lock(metrics_mu_);
        metrics_.spec_declined_steps = planner_.declined_steps();
    }
    // The draft model and Medusa are told how many tokens pay, and their time is the plan's.
    for (SpecMethod m : {SpecMethod::Draft, SpecMethod::Medusa}) {
        jobs.clear();
        for (const Want& w : want)
            if (w.seq->spec == m && w.k > 0) jobs.push_back(job(w.seq, w.k));
        if (jobs.empty()) continue;
        const auto t0 = Clock::now();
        (m == SpecMethod::Draft ? draft_ : medusa_)->propose(jobs);
        int64_t drafted = 0;
        for (const ProposalJob& j : jobs) drafted += static_cast<int64_t>(j.out->tokens.size());
        planner_.record_draft_time(drafted,
                                   std::chrono::duration<double>(Clock::now() - t0).count());
        for (const Want& w : want)
            if (w.seq->spec == m) fit_draft(*w.seq);
    }
}

// A draft as the sequence can verify it: a tree within the model's sliding windows, and for a
// constrained sequence only the part its grammar allows (a token the grammar forbids could
// never be accepted, and neither could anything after it).
void Engine::fit_draft(Sequence& s) {
    fit_tree_to_window(s.draft, tree_window_);
    if (!s.matcher || s.draft.tokens.empty()) return;
    s.draft.keep_chain();  // a tree's branches would each need the grammar's state
    grammar::Matcher m = *s.matcher;
    size_t keep = 0;
    while (keep < s.draft.tokens.size() && m.accept(s.draft.tokens[keep])) ++keep;
    s.draft.cut(keep);
}

void Engine::verify_and_emit(Sequence& seq, const float* logits, size_t first_row) {
    const int n_vocab = runner_->n_vocab();
    const int proposed = static_cast<int>(seq.draft.tokens.size());
    std::vector<int32_t> history = seq.tokens;
    // Constrained: each position is verified against the grammar's mask in the state the draft
    // tokens before it lead to, so the kept tokens follow the constrained distribution exactly.
    std::vector<float> masked;
    const float* rows = logits;
    if (seq.matcher) {
        masked.resize(static_cast<size_t>(proposed + 1) * n_vocab);
        grammar::Matcher m = *seq.matcher;
        std::vector<float> row;
        for (int i = 0; i <= proposed; ++i) {
            if (!mask_logits(*m.mask(), logits + static_cast<size_t>(i) * n_vocab, n_vocab, row))
                std::fill(row.begin(), row.end(), 0.0f);  // unreachable: drafts are pre-checked
            std::copy(row.begin(), row.end(), masked.begin() + static_cast<size_t>(i) * n_vocab);
            if (i < proposed) m.accept(seq.draft.tokens[i]);
        }
        rows = masked.data();
    }
    // A tree is never constrained (fit_draft keeps a chain).
    const TreeVerdict v = judge_draft(*seq.sampler, rows, n_vocab, seq.draft, history);
    // A tree's accepted branch moves down to its positions' slots, from the chunk verified at
    // the last token's slot (a chain's, and a tree's leading chain, move nothing).
    const auto moves = tree_slot_moves(v, seq.cache_len() - 1);
    if (!moves.empty()) {
        runner_->move_slots(seq.kv.blocks, seq.kv_window.blocks, moves);
        std::lock_guard lock(metrics_mu_);
        ++metrics_.spec_tree_moved_steps;
    }
    const std::vector<int32_t>& toks = v.tokens;
    const int accepted = v.accepted();
    if (seq.spec == SpecMethod::Lookahead) {
        std::vector<int32_t> fed{seq.tokens.back()};
        fed.insert(fed.end(), seq.draft.tokens.begin(), seq.draft.tokens.end());
        lookahead_->observe(seq.id, fed, rows, n_vocab);
    }
    if (seq.spec == SpecMethod::Medusa)  // the row that gave the last token kept
        if (const auto h = runner_->hidden_row(first_row + static_cast<size_t>(v.rows.back()));
            !h.empty())
            medusa_->observe_hidden(seq.id, h);
    // A tree's acceptance is counted by depth, as a chain's: how far its branch got.
    const int judged = seq.draft.depth();
    seq.draft.clear();
    {
        std::lock_guard lock(metrics_mu_);
        ++metrics_.spec_steps;
        metrics_.spec_draft_tokens += proposed;
        metrics_.spec_accepted_tokens += accepted;
    }
    planner_.record_verification(seq.spec_acceptance, judged, accepted);
    for (size_t i = 0; i < toks.size(); ++i) {
        emit(seq, toks[i], logits + static_cast<size_t>(v.rows[i]) * n_vocab);
        if (seq.status == SeqStatus::Finished) return;  // a stop: the rest is discarded
    }
    // The accepted draft tokens' keys and values are valid; the rejected ones' blocks go back.
    scheduler_->on_computed(&seq, accepted);
    scheduler_->trim_blocks(&seq);
}

// Appends one token to a sequence, streams it, and finishes the sequence on a stop or length.
void Engine::emit(Sequence& seq, int32_t tok, const float* logits) {
    if (int proposed, accepted; seq.spec_shadow.observe(tok, &proposed, &accepted))
        planner_.record_verification(seq.spec_acceptance, proposed, accepted);
    Request& r = *seq.request;
    const RequestParams& p = r.params;
    const int n_vocab = runner_->n_vocab();
    // No row where the device picked the token (then no logprobs were asked for).
    const std::span<const float> row =
        logits ? std::span<const float>(logits, n_vocab) : std::span<const float>();
    const auto now = Clock::now();

    TokenEvent ev;
    ev.request = r.id;
    ev.index = seq.index;
    ev.token = tok;
    if (seq.output_len() == 0) ev.prompt_logprobs = r.prompt_lp_done;
    if (p.top_logprobs >= 0)
        ev.logprob = token_logprobs(row, tok, p.top_logprobs, &ev.top_logprobs);

    seq.tokens.push_back(tok);
    ++r.output_tokens;
    if (r.first_token_time == Clock::time_point{}) r.first_token_time = now;
    if (seq.index == 0 && seq.last_token_time != Clock::time_point{})
        seq.itl_s.push_back(seconds(now - seq.last_token_time));
    seq.last_token_time = now;
    {
        std::lock_guard lock(metrics_mu_);
        ++metrics_.generation_tokens_total;
        if (seq.output_len() == 1 && seq.index == 0) {
            metrics_.ttft.observe(seconds(now - r.arrival_time));
            metrics_.prompt_tokens_total += r.prompt.size();
        } else if (seq.index == 0) {
            metrics_.itl.observe(seq.itl_s.back());
        }
    }

    const bool eog = !p.ignore_eos && model_.tokenizer->is_eog(tok);
    const bool stop_id =
        std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end();
    if (!eog && !stop_id) ev.text = seq.text->push(tok);
    // A grammar that is complete and allows nothing more ends the output without waiting a step
    // for the end token.
    bool grammar_done = false;
    if (seq.awaiting_trigger && !eog && !stop_id)
        start_grammar_at_trigger(seq, tok);
    else if (seq.matcher) {
        seq.matcher->accept(tok);
        grammar_done =
            seq.matcher->ended() || (seq.matcher->complete() && !seq.matcher->can_continue());
    }
    FinishReason reason = FinishReason::None;
    if (eog || stop_id || seq.text->stopped() || grammar_done)
        reason = FinishReason::Stop;
    else if (seq.output_len() >= p.max_tokens || context_len(seq) >= max_model_len_)
        reason = FinishReason::Length;
    if (reason != FinishReason::None) {
        finish(seq, reason, &ev);
    } else {
        ev.prompt_tokens = static_cast<int>(r.prompt.size());
        ev.completion_tokens = seq.output_len();
        ev.cached_tokens = r.cached_tokens;
        deliver(r, ev);
    }
}

// A lazy constraint starts where its trigger appears in the output: the grammar (which begins
// with the trigger) consumes the output from the trigger's first byte. Output the grammar
// rejects from there on was already drawn unconstrained; the sequence then stays free.
void Engine::start_grammar_at_trigger(Sequence& seq, int32_t tok) {
    const RequestParams& p = seq.request->params;
    const auto& pieces = p.grammar->vocab().pieces;
    if (tok >= 0 && tok < static_cast<int32_t>(pieces.size())) seq.trigger_window += pieces[tok];
    const std::string& trigger = p.grammar_trigger;
    const size_t at = seq.trigger_window.find(trigger);
    if (at == std::string::npos) {
        if (seq.trigger_window.size() > trigger.size())
            seq.trigger_window.erase(0, seq.trigger_window.size() - trigger.size());
        return;
    }
    seq.awaiting_trigger = false;
    auto m = std::make_unique<grammar::Matcher>(p.grammar);
    if (m->accept_text(seq.trigger_window.substr(at))) seq.matcher = std::move(m);
    seq.trigger_window.clear();
}

// Ends one sequence: the final event (carrying `last`'s token, if any), its blocks back to the
// pool, and once every sibling has ended, the request's metrics.
void Engine::finish(Sequence& seq, FinishReason reason, TokenEvent* last) {
    Request& r = *seq.request;
    TokenEvent ev;
    if (last) ev = std::move(*last);
    if (!last && seq.output_len() <= 0) ev.prompt_logprobs = r.prompt_lp_done;
    ev.request = r.id;
    ev.index = seq.index;
    if (reason != FinishReason::Abort && reason != FinishReason::Error)
        ev.text += seq.text->flush();
    ev.finished = true;
    ev.finish_reason = reason;
    if (reason == FinishReason::Error) ev.error = r.error;
    ev.prompt_tokens = static_cast<int>(r.prompt.size());
    ev.completion_tokens = std::max(0, seq.output_len());
    ev.cached_tokens = r.cached_tokens;
    if (reason == FinishReason::Abort) r.aborted = true;
    const bool was_waiting_unstarted = !r.started;
    scheduler_->remove(&seq);
    if (draft_) draft_->release(seq.id);
    if (medusa_) medusa_->release(seq.id);
    lookahead_->release(seq.id);
    deliver(r, ev);
    if (--r.unfinished > 0) return;

    if (was_waiting_unstarted) --queued_;
    const auto now = Clock::now();
    RequestMetrics m;
    m.prompt_tokens = static_cast<int>(r.prompt.size());
    m.output_tokens = r.output_tokens;
    m.cached_tokens = r.cached_tokens;
    m.priority = r.params.priority;
    m.e2e_s = seconds(now - r.arrival_time);
    if (r.started) m.queue_s = seconds(r.scheduled_time - r.arrival_time);
    if (r.first_token_time != Clock::time_point{})
        m.ttft_s = seconds(r.first_token_time - r.arrival_time);
    for (const auto& s : live_.at(r.id)->seqs)
        if (s->index == 0) m.itl_s = s->itl_s;
    {
        std::lock_guard lock(metrics_mu_);
        if (r.output_tokens == 0 && r.started && reason != FinishReason::Abort)
            metrics_.prompt_tokens_total += r.prompt.size();  // scored only: no first token
        ++metrics_.finished[finish_reason_name(reason)];
        metrics_.e2e.observe(m.e2e_s);
        if (r.started) metrics_.queue.observe(m.queue_s);
        finished_metrics_.push_back(std::move(m));
    }
    done_.push_back(r.id);
}

// A callback runs code the engine does not own (a server's, a benchmark's): what it throws
// fails its own request, once the step is done with it, and never the engine thread. A throw
// from the final event has nothing left to fail.
void Engine::deliver(Request& r, const TokenEvent& ev) {
    if (!r.on_token) return;
    try {
        r.on_token(ev);
    } catch (const std::exception& e) {
        if (ev.finished)
            std::fprintf(stderr, "ferry: request %llu: its last event's callback threw: %s\n",
                         static_cast<unsigned long long>(r.id), e.what());
        else
            failed_.emplace_back(r.id, e.what());
    }
}

// Ends every unfinished sequence of the request with FinishReason::Error; its blocks go back
// to the pool as for any other finish.
void Engine::fail(Request& r, std::string what) {
    if (r.error.empty()) r.error = what.empty() ? "unknown error" : std::move(what);
    auto it = live_.find(r.id);
    if (it == live_.end()) return;
    for (auto& seq : it->second->seqs)
        if (seq->status != SeqStatus::Finished) finish(*seq, FinishReason::Error, nullptr);
}

void Engine::fail_pending() {
    while (!failed_.empty()) {
        auto failed = std::exchange(failed_, {});
        for (auto& [id, what] : failed)
            if (auto it = live_.find(id); it != live_.end())
                fail(*it->second->request, "the request's callback threw: " + what);
    }
}

void Engine::retire_finished() {
    for (RequestId id : done_) {
        live_.erase(id);
        --active_;
    }
    done_.clear();
}

void Engine::publish_metrics() {
    std::lock_guard lock(metrics_mu_);
    metrics_.running = scheduler_->num_running();
    metrics_.waiting = scheduler_->num_waiting() + static_cast<int>(pending_adds_.size());
    metrics_.kv_blocks_used = scheduler_->pool().num_used();
    metrics_.kv_blocks_cached = scheduler_->pool().num_cached();
    if (const kv::BlockPool* w = scheduler_->window_pool())
        metrics_.kv_window_blocks_used = w->num_used();
    metrics_.kv_waste_fraction = scheduler_->kv_waste_fraction();
    metrics_.prefix_query_tokens = scheduler_->prefix_query_tokens();
    metrics_.prefix_hit_tokens = scheduler_->prefix_hit_tokens();
    metrics_.preemptions = scheduler_->preemptions();
    metrics_.priority_preemptions = scheduler_->priority_preemptions();
    metrics_.kv_blocks_dropped = scheduler_->dropped_blocks();
    metrics_.kv_evicted_tokens = scheduler_->evicted_tokens();
}

EngineMetrics Engine::metrics() const {
    EngineMetrics m;
    {
        std::lock_guard lock(metrics_mu_);
        m = metrics_;
    }
    // Read when asked (a scrape), not every step: /proc/meminfo or cudaMemGetInfo. A device in
    // error shows 0 free rather than failing the scrape (the step that meets it fails its
    // requests with the reason).
    try {
        m.device_memory_free = model_.backend->memory_free_bytes();
    } catch (const std::exception&) {
        m.device_memory_free = 0;
    }
    return m;
}

std::vector<RequestMetrics> Engine::take_finished_metrics() {
    std::lock_guard lock(metrics_mu_);
    return std::exchange(finished_metrics_, {});
}

void Engine::start() {
    if (thread_.joinable()) return;
    stopping_ = false;
    thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
    if (!thread_.joinable()) return;
    stopping_ = true;
    cv_.notify_all();
    thread_.join();
}

void Engine::loop() {
    while (!stopping_) {
        bool ran = false;
        try {
            ran = step();
        } catch (const std::exception& e) {
            // Not one request's fault (the forward pass or the scheduler threw): every request
            // in flight ends with the error, and the engine goes on with what arrives next.
            std::fprintf(stderr, "ferry: engine step failed: %s\n", e.what());
            for (auto& [id, live] : live_)
                fail(*live->request, std::string("the engine step failed: ") + e.what());
            fail_pending();
            retire_finished();
            ran = true;
        }
        if (ran) continue;
        // Nothing ran: sleep until a request or an abort arrives (or a static batch's
        // waiting time may have passed).
        {
            std::unique_lock lock(inbox_mu_);
            cv_.wait_for(lock, std::chrono::milliseconds(active_.load() > 0 ? 1 : 50), [&] {
                return stopping_ || !pending_adds_.empty() || !pending_aborts_.empty() ||
                       abort_all_;
            });
        }
        // The other ranks of a split model know rank 0 is alive while it serves nothing, and
        // a rank that died is found now, not at the next request.
        if (model_.model->comm() && !failure()) {
            try {
                runner_->keep_group_alive(std::chrono::seconds(1));
            } catch (const std::exception& e) {
                std::fprintf(stderr, "ferry: %s\n", e.what());
            }
        }
    }
}

}  // namespace ferry::engine
