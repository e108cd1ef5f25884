#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace ferry::engine {
namespace {
constexpr int kBlock = 256;  // a single stream needs no fine-grained blocks
// Under eviction blocks are what it gives back, so they are the engine's size, and a prompt
// goes in in chunks so the cache never holds more than the budget and one chunk.
constexpr int kEvictBlock = 16;
constexpr int kEvictChunk = 256;

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One sequence's plan: how many of `max_k` draft tokens pay (engine/spec_planner.h).
int planned_k(SpecPlanner& planner, const DepthRates& acc, int max_k, double s_per_token) {
    const DraftCandidate c{acc, max_k, s_per_token};
    return planner.plan({&c, 1}, 1, 1.0).k[0];
}
}  // namespace

Generator::Generator(const model::LlamaModel& model, std::shared_ptr<kernels::Backend> backend,
                     int64_t n_ctx, kv::KvFormat kv, KvEvictionConfig eviction)
    : n_ctx_(n_ctx),
      window_(model.config().smallest_window()),
      eviction_(eviction),
      // Under eviction: the context, and the sinks' originals with a spare block.
      runner_(model, std::move(backend),
              eviction.on()
                  ? (n_ctx + kEvictBlock - 1) / kEvictBlock + eviction.sink_blocks(kEvictBlock) + 1
                  : (n_ctx + kBlock - 1) / kBlock,
              eviction.on() ? kEvictBlock : kBlock, std::move(kv)),
      planner_(static_cast<int>(std::min<int64_t>(n_ctx, 4096)) + 1) {
    if (eviction_.on()) {
        blocks_mgr_ = std::make_unique<BlockManager>(runner_.kv().n_blocks(), kEvictBlock, false);
        return;
    }
    blocks_.resize(static_cast<size_t>(runner_.kv().n_blocks()));
    for (size_t i = 0; i < blocks_.size(); ++i) blocks_[i] = static_cast<int32_t>(i);
}

Status Generator::check_eviction(const model::LlamaModel& model, quant::KvDType kv, int64_t n_ctx,
                                 const KvEvictionConfig& e) {
    return check_kv_eviction(e, kv, model.config().sliding_window > 0, kEvictBlock, kEvictChunk,
                             "raise --ctx", n_ctx, "the context");
}

void Generator::reset() {
    history_.clear();
    if (blocks_mgr_) blocks_mgr_->release(table_);
}

void Generator::truncate(int64_t n) {
    if (n >= position()) return;
    // Once something was evicted, the cache follows the history only after the last block
    // taken out: past the sinks (streaming), within the recent window (H2O). A cut before that
    // starts over.
    if (blocks_mgr_ && table_.evicted > 0) {
        const int64_t follows_from =
            eviction_.kind == KvEvictionKind::H2O
                ? cache_len() - eviction_.recent_tokens()
                : int64_t{eviction_.sink_blocks(kEvictBlock)} * kEvictBlock;
        if (n - table_.evicted < follows_from) {
            reset();
            return;
        }
    }
    history_.resize(static_cast<size_t>(n));
    if (blocks_mgr_) blocks_mgr_->trim(table_, cache_len());
}

std::span<const float> Generator::feed(std::span<const int32_t> tokens, int n_logits,
                                       std::span<const uint64_t> tree) {
    std::span<const float> logits;
    if (!blocks_mgr_) {
        ModelRunner::Work w{tokens, position(), blocks_, n_logits};
        w.tree = tree;
        logits = runner_.run({&w, 1});
    } else {
        // As the engine's scheduler does: evict what is over the budget, then place the tokens.
        SchedulerOutput out;
        blocks_mgr_->evict_over_budget(table_, cache_len(), eviction_, out.copies, out.moves);
        blocks_mgr_->trim(table_, cache_len());  // positions a rejected draft left behind
        if (!blocks_mgr_->allocate(table_, cache_len(),
                                   cache_len() + static_cast<int64_t>(tokens.size()), out.copies))
            throw std::logic_error("Generator: the KV cache is smaller than its budget");
        ScheduledSeq s;
        s.tokens.assign(tokens.begin(), tokens.end());
        s.start_pos = cache_len();
        s.rope_offset = table_.evicted;
        s.blocks = table_.blocks;
        s.num_draft = std::max(0, n_logits - 1);
        s.wants_logits = n_logits > 0;
        s.attn_mass = eviction_.kind == KvEvictionKind::H2O;
        s.tree.assign(tree.begin(), tree.end());
        out.seqs.push_back(std::move(s));
        logits = runner_.execute(out);
        if (eviction_.kind == KvEvictionKind::H2O)  // the attention each block drew
            BlockManager::add_attention_mass(table_, runner_.attention_mass(0));
    }
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    return logits;
}

int32_t Generator::feed_and_pick(std::span<const int32_t> tokens, Sampler& sampler,
                                 bool on_device) {
    if (!on_device) {
        const std::span<const float> logits = feed(tokens, 1);
        return sampler.sample(logits, history_);
    }
    if (sampler.plain_greedy()) {
        runner_.pick_next();
    } else {
        // The penalties count the history as it will be once these tokens are in (a copy only
        // where they read it).
        pick_history_.clear();
        if (sampler.penalises()) {
            pick_history_.assign(history_.begin(), history_.end());
            pick_history_.insert(pick_history_.end(), tokens.begin(), tokens.end());
        }
        pick_edits_.clear();
        pick_row_ = sampler.device_row(pick_history_, pick_edits_);
        runner_.pick_next({&pick_row_, 1}, pick_edits_);
    }
    try {
        feed(tokens, 1);
    } catch (...) {
        runner_.cancel_pick();  // feed can throw before the step that would disarm it
        throw;
    }
    return runner_.picked().front();
}

Expected<GenerationStats> Generator::generate(std::span<const int32_t> prompt,
                                              const SamplingParams& params, int max_tokens,
                                              const std::function<bool(int32_t)>& on_token,
                                              const std::function<bool(int32_t)>& is_eog,
                                              const SpecRun& spec) {
    const int64_t n_vocab = runner_.n_vocab();
    if (prompt.empty()) return make_error("the prompt is empty");
    for (int32_t t : prompt)
        if (t < 0 || t >= n_vocab)
            return make_error("token id {} is outside the vocabulary (0..{})", t, n_vocab - 1);
    if (context_len() + static_cast<int64_t>(prompt.size()) > n_ctx() && !eviction_.past_context())
        return make_error("the prompt is {} tokens but the context holds {} ({} already used)",
                          prompt.size(), n_ctx(), position());

    GenerationStats st;
    st.prompt_tokens = static_cast<int>(prompt.size());
    Sampler sampler(params);
    const int k_max =
        spec.proposer ? std::max(1, std::min(spec.proposer->own_budget() ? kMaxDraftTokens : spec.k,
                                             spec.proposer->max_draft()))
                      : 0;
    // Medusa drafts from the hidden state of the position that gave the last token.
    runner_.set_keep_hidden(spec.proposer && spec.proposer->wants_hidden());
    auto show_hidden = [&](int row) {  // rows are kept only for such a proposer
        if (const auto h = runner_.hidden_row(static_cast<size_t>(row)); !h.empty())
            spec.proposer->observe_hidden(0, h);
    };
    // A plain step's token is drawn where the logits are when the device draws (a speculative
    // step verifies against whole rows, so it always reads them).
    const bool on_device = !spec.proposer && picks_on_device(sample_on_, runner_.backend().device(),
                                                             sampler.plain_greedy());
    auto t0 = std::chrono::steady_clock::now();
    // The first token from the prompt's last position; prefill_ms includes its draw.
    int32_t first = -1;
    if (eviction_.on()) {  // in chunks, the last one's last logits kept, each a step
        for (size_t at = 0; at < prompt.size(); at += kEvictChunk) {
            const size_t n = std::min<size_t>(kEvictChunk, prompt.size() - at);
            const auto t_chunk = std::chrono::steady_clock::now();
            if (at + n == prompt.size())
                first = feed_and_pick(prompt.subspan(at, n), sampler, on_device);
            else
                feed(prompt.subspan(at, n), 0);
            planner_.record_step(static_cast<int64_t>(n), ms_since(t_chunk) * 1e-3);
        }
    } else {
        first = feed_and_pick(prompt, sampler, on_device);
        planner_.record_step(static_cast<int64_t>(prompt.size()), ms_since(t0) * 1e-3);
    }
    st.prefill_ms = ms_since(t0);
    show_hidden(0);
    if (spec.proposer) spec.proposer->prefill(0, history_);

    st.finish_reason = "length";
    auto t_decode = std::chrono::steady_clock::now();
    // Tokens decided but not yet fed: one per plain step, up to K + 1 after a verification.
    std::vector<int32_t> pending{first};
    st.ttft_ms = ms_since(t0);
    t_decode = std::chrono::steady_clock::now();
    Draft draft;
    AcceptanceStats acceptance;
    ShadowDraft shadow;
    const uint64_t declined_before = planner_.declined_steps();
    for (;;) {
        bool done = false;
        for (int32_t tok : pending) {
            ++st.generated_tokens;
            if (int proposed, accepted; shadow.observe(tok, &proposed, &accepted))
                planner_.record_verification(acceptance, proposed, accepted);
            if ((is_eog && is_eog(tok)) || (on_token && !on_token(tok))) {
                st.finish_reason = "stop";
                done = true;
                break;
            }
            if (st.generated_tokens == max_tokens) {
                done = true;
                break;
            }
        }
        if (done || context_len() + 1 > n_ctx()) break;
        const int32_t last = pending.back();

        draft.clear();
        if (spec.proposer) {
            const int64_t room = std::min<int64_t>(max_tokens - st.generated_tokens - 1,
                                                   n_ctx() - context_len() - 1);
            int want = static_cast<int>(std::min<int64_t>(k_max, room));
            const bool cost = spec.policy == SpecPolicy::Cost, cheap = spec.proposer->cheap();
            // The draft model is told how many tokens pay; prompt lookup drafts the most and
            // the plan trims.
            if (want > 0 && cost && !cheap)
                want = planned_k(planner_, planner_.acceptance(acceptance), want,
                                 planner_.draft_seconds_per_token());
            if (want > 0) {
                // Under streaming eviction the stream never ends: prompt lookup searches what
                // the cache holds at most, not everything it ever saw.
                const size_t look =
                    eviction_.past_context()
                        ? std::min(history_.size(), static_cast<size_t>(eviction_.budget))
                        : history_.size();
                std::vector<int32_t> ctx(history_.end() - static_cast<std::ptrdiff_t>(look),
                                         history_.end());
                ctx.push_back(last);
                ProposalJob job{0,    ctx,      static_cast<int64_t>(history_.size() - look),
                                want, &sampler, &draft};
                const auto t_draft = std::chrono::steady_clock::now();
                spec.proposer->propose({&job, 1});
                if (!cheap)
                    planner_.record_draft_time(static_cast<int64_t>(draft.tokens.size()),
                                               ms_since(t_draft) * 1e-3);
            }
            if (cost && cheap && !draft.tokens.empty()) {
                const int keep = planned_k(planner_, planner_.acceptance(acceptance, draft.accept),
                                           static_cast<int>(draft.tokens.size()), 0.0);
                if (keep == 0 && !shadow.active()) shadow.start(draft.chain_tokens());
                draft.cut(static_cast<size_t>(keep));
                if (keep > 0) shadow.clear();  // a real verification judges it
            }
            st.spec_declined_steps = static_cast<int>(planner_.declined_steps() - declined_before);
        }
        const auto t_step = std::chrono::steady_clock::now();
        fit_tree_to_window(draft, window_);
        const int64_t before = position();
        std::vector<int32_t> run{last};
        run.insert(run.end(), draft.tokens.begin(), draft.tokens.end());
        if (draft.tokens.empty()) {
            pending.assign(1, feed_and_pick(run, sampler, on_device));
            show_hidden(0);
            planner_.record_step(1, ms_since(t_step) * 1e-3);
            if (spec.proposer) {
                st.spec_step_drafted.push_back(0);
                st.spec_step_accepted.push_back(0);
            }
            continue;
        }
        const std::span<const float> logits =
            feed(run, static_cast<int>(run.size()),
                 draft.is_tree() ? tree_masks(draft) : std::vector<uint64_t>{});
        // Roll back to the verified prefix: rejected positions are simply overwritten later.
        history_.resize(static_cast<size_t>(before + 1));
        std::vector<int32_t> hist = history_;
        const TreeVerdict v =
            judge_draft(sampler, logits.data(), static_cast<int>(n_vocab), draft, hist);
        if (!draft.is_tree())  // lookahead's refinements read a chain's rows
            spec.proposer->observe(0, run, logits.data(), static_cast<int>(n_vocab));
        // The last token's slot: its index less what eviction took out, feed's included.
        const auto moves = tree_slot_moves(v, before - table_.evicted);
        if (!moves.empty()) {
            runner_.move_slots(blocks_mgr_ ? std::span<const int32_t>(table_.blocks)
                                           : std::span<const int32_t>(blocks_),
                               {}, moves);
            ++st.spec_tree_moved_steps;
        }
        pending = v.tokens;
        planner_.record_step(static_cast<int64_t>(run.size()), ms_since(t_step) * 1e-3);
        const int accepted = v.accepted();
        show_hidden(v.rows.back());
        for (int j = 1; j <= accepted; ++j)
            history_.push_back(
                draft.tokens[static_cast<size_t>(v.rows[static_cast<size_t>(j)] - 1)]);
        ++st.spec_steps;
        st.spec_draft_tokens += static_cast<int>(draft.tokens.size());
        st.spec_accepted_tokens += accepted;
        st.spec_step_drafted.push_back(static_cast<int>(draft.tokens.size()));
        st.spec_step_accepted.push_back(accepted);
        planner_.record_verification(acceptance, draft.depth(), accepted);
    }
    st.decode_ms = ms_since(t_decode);
    if (spec.proposer) spec.proposer->release(0);
    runner_.set_keep_hidden(false);
    return st;
}

Expected<std::vector<float>> Generator::logits_for(std::span<const int32_t> tokens) {
    if (tokens.empty() || static_cast<int64_t>(tokens.size()) > n_ctx())
        return make_error("need 1..{} tokens, got {}", n_ctx(), tokens.size());
    reset();
    const auto logits = feed(tokens, 1);
    return std::vector<float>(logits.begin(), logits.end());
}

}  // namespace ferry::engine
