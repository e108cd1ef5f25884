#include "engine/scheduler.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <unordered_map>

namespace ferry::engine {
namespace {

// Runs first: lower priority value, then earlier arrival, then lower completion index.
bool runs_before(const Sequence* a, const Sequence* b) {
    const Request& ra = *a->request;
    const Request& rb = *b->request;
    if (ra.params.priority != rb.params.priority) return ra.params.priority < rb.params.priority;
    if (ra.arrival != rb.arrival) return ra.arrival < rb.arrival;
    return a->index < b->index;
}

// A prompt whose logprobs are wanted returns a logits row per position (n_vocab floats each:
// 2048 positions of a 152k vocabulary would be 1.2 GB), so its chunks are capped; the rest of
// the step's budget goes to others.
constexpr int kMaxLogitRowsPerChunk = 256;

bool wants_prompt_rows(const Sequence* s) {
    return s->request && s->request->params.prompt_logprobs >= 0 && !s->request->prompt_lp_done &&
           s->num_computed + 1 < s->prompt_len;
}

int chunk_cap(const Sequence* s) {
    return wants_prompt_rows(s) ? kMaxLogitRowsPerChunk : std::numeric_limits<int>::max();
}

}  // namespace

Scheduler::Scheduler(const EngineConfig& config, int max_model_len, int64_t n_blocks, int kv_window,
                     int64_t n_window_blocks)
    : config_(config),
      max_model_len_(max_model_len),
      kv_window_(config.kv_layout == EngineConfig::KvLayout::Paged ? kv_window : 0),
      blocks_(n_blocks, config.block_size,
              config.prefix_cache && config.kv_layout == EngineConfig::KvLayout::Paged) {
    if (kv_window_ > 0 && n_window_blocks > 0)
        window_blocks_.emplace(n_window_blocks, config.block_size, blocks_.prefix_caching());
}

Sequence* Scheduler::sequence(uint64_t id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : it->second;
}

void Scheduler::insert_waiting(Sequence* seq) {
    seq->status = SeqStatus::Waiting;
    waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), seq, runs_before), seq);
}

void Scheduler::add(Sequence* seq) {
    by_id_[seq->id] = seq;
    insert_waiting(seq);
}

void Scheduler::add_running(Sequence* seq) {
    by_id_[seq->id] = seq;
    seq->status = SeqStatus::Running;
    running_.push_back(seq);
}

void Scheduler::share_blocks(const Sequence& parent, Sequence& child) {
    blocks_.share(parent.kv, child.kv);
    if (window_blocks_) window_blocks_->share(parent.kv_window, child.kv_window);
    child.num_computed = parent.num_computed;
}

int Scheduler::reserve_tokens(const Sequence* seq) const {
    const Request& r = *seq->request;
    const int64_t want = static_cast<int64_t>(r.prompt.size()) + r.params.max_tokens;
    return static_cast<int>(std::min<int64_t>(want, max_model_len_));
}

bool Scheduler::ensure_blocks(Sequence* seq, int num_tokens, SchedulerOutput& out) {
    int64_t need_tokens = seq->cache_len() + num_tokens;
    if (config_.kv_layout == EngineConfig::KvLayout::Contiguous)
        need_tokens = std::max<int64_t>(need_tokens, reserve_tokens(seq));
    if (!window_blocks_)
        return blocks_.allocate(seq->kv, seq->cache_len(), need_tokens, out.copies);
    // Both tables grow, or neither.
    if (window_blocks_->num_free() <
        window_blocks_->blocks_needed(seq->kv_window, seq->cache_len(), need_tokens))
        return false;
    if (!blocks_.allocate(seq->kv, seq->cache_len(), need_tokens, out.copies)) return false;
    return window_blocks_->allocate(seq->kv_window, seq->cache_len(), need_tokens,
                                    out.window_copies);
}

Scheduler::Evicted Scheduler::evict(Sequence* seq, SchedulerOutput& out) {
    Evicted ev{out.copies.size(), out.moves.size(), 0};
    ev.tokens = blocks_.evict_over_budget(seq->kv, seq->cache_len(), config_.kv_eviction,
                                          out.copies, out.moves);
    evicted_tokens_ += static_cast<uint64_t>(ev.tokens);
    return ev;
}

void Scheduler::forget_eviction(const Evicted& ev, SchedulerOutput& out) {
    // The sequence gave back every block since: its sinks' copy and move are not to be done.
    out.copies.resize(ev.copies);
    out.moves.resize(ev.moves);
    evicted_tokens_ -= static_cast<uint64_t>(ev.tokens);
}

void Scheduler::add_attention_mass(Sequence* seq, std::span<const float> mass) {
    BlockManager::add_attention_mass(seq->kv, mass);
}

void Scheduler::release_blocks(Sequence* seq) {
    blocks_.release(seq->kv);
    if (window_blocks_) window_blocks_->release(seq->kv_window);
}

int Scheduler::match_prefix(Sequence* seq) {
    if (!blocks_.prefix_caching() || !seq->kv.blocks.empty()) return seq->num_computed;
    if (wants_prompt_rows(seq)) return seq->num_computed;  // cached blocks kept no logits
    seq->num_computed = blocks_.match_prefix(seq->kv, seq->tokens);
    if (window_blocks_ && seq->num_computed > 0) {
        // The sliding layers' blocks of the match's window must be cached too.
        const int m =
            window_blocks_->match_window(seq->kv_window, seq->kv, seq->tokens, kv_window_);
        seq->num_computed = m * config_.block_size;
        blocks_.trim(seq->kv, seq->num_computed);
    }
    return seq->num_computed;
}

void Scheduler::emit(Sequence* seq, int num_tokens, int num_draft, SchedulerOutput& out) const {
    ScheduledSeq s;
    s.seq_id = seq->id;
    const auto real = static_cast<size_t>(num_tokens - num_draft);
    const auto first = seq->tokens.begin() + seq->num_computed;
    s.tokens.assign(first, first + static_cast<std::ptrdiff_t>(real));
    s.tokens.insert(s.tokens.end(), seq->draft.tokens.begin(),
                    seq->draft.tokens.begin() + num_draft);
    s.start_pos = seq->cache_len();
    s.rope_offset = seq->kv.evicted;
    s.attn_mass = config_.kv_eviction.kind == KvEvictionKind::H2O;
    s.blocks = seq->kv.blocks;
    s.window_blocks = seq->kv_window.blocks;
    s.num_draft = num_draft;
    // A tree is verified from the sequence's last token, its one uncomputed token (drafts are
    // made only for a sequence with one).
    if (num_draft > 0 && seq->draft.is_tree()) {
        if (real != 1) throw std::logic_error("Scheduler: a draft tree behind a prompt chunk");
        s.tree = tree_masks(seq->draft);
    }
    s.wants_logits =
        seq->num_computed + static_cast<int64_t>(real) == static_cast<int64_t>(seq->tokens.size());
    s.all_logits = num_draft == 0 && wants_prompt_rows(seq);
    out.total_tokens += num_tokens;
    out.seqs.push_back(std::move(s));
}

Sequence* Scheduler::pick_victim() const {
    return running_.empty() ? nullptr : running_.back();  // running_ is kept sorted
}

void Scheduler::preempt(Sequence* victim, SchedulerOutput& out) {
    release_blocks(victim);
    victim->draft.clear();
    victim->num_computed = 0;
    running_.erase(std::find(running_.begin(), running_.end(), victim));
    insert_waiting(victim);  // keeps its arrival, so it boards again before newer requests
    ++preemptions_;
    ++out.preempted;
}

void Scheduler::preempt_for_priority(SchedulerOutput& out) {
    if (config_.batching == EngineConfig::Batching::Static) return;  // a batch runs to its end
    const int bs = config_.block_size;
    int64_t seats = config_.max_num_seqs - static_cast<int64_t>(running_.size());
    int64_t free_blocks = blocks_.num_free();
    // By index: a victim joins waiting_ (behind w, its priority being worse).
    for (size_t i = 0; i < waiting_.size(); ++i) {  // best first
        Sequence* w = waiting_[i];
        // What boarding takes: a seat and the blocks of its first chunk (one more for the
        // running ones' growth), prefix-cache hits ignored (they only make it cheaper).
        const int chunk = std::min(w->num_uncomputed(), config_.max_num_batched_tokens);
        const int64_t need = (chunk + bs - 1) / bs + 1;
        while (seats < 1 || free_blocks < need) {
            Sequence* victim = pick_victim();
            if (!victim || victim->request->params.priority <= w->request->params.priority)
                return;  // nobody worse runs: neither this one nor any later one can board
            const int64_t before = blocks_.num_free();
            boards_below_ = std::min(boards_below_, victim->request->params.priority);
            preempt(victim, out);
            ++priority_preemptions_;
            ++seats;
            free_blocks += blocks_.num_free() - before;
        }
        --seats;
        free_blocks -= need;
    }
}

bool Scheduler::admit_allowed() const {
    if (config_.batching == EngineConfig::Batching::Continuous) return true;
    return !waiting_.empty() && (static_batch_open_ || running_.empty());
}

SchedulerOutput Scheduler::schedule(Clock::time_point now, int step_token_limit) {
    SchedulerOutput out;
    int budget = config_.max_num_batched_tokens;
    std::stable_sort(running_.begin(), running_.end(), runs_before);
    boards_below_ = std::numeric_limits<int>::max();
    preempt_for_priority(out);
    const int priority_preempted = out.preempted;
    // Prefill tokens this step may carry: fewer while someone waits for its next token.
    int decode_tokens = 0;
    for (const Sequence* s : running_)
        if (s->num_uncomputed() == 1) decode_tokens += 1 + static_cast<int>(s->draft.tokens.size());
    const bool decoding = decode_tokens > 0;
    int prefill_left = decoding && config_.prefill_chunk_while_decoding > 0
                           ? config_.prefill_chunk_while_decoding
                           : config_.max_num_batched_tokens;
    if (decoding && step_token_limit > 0)
        prefill_left = std::max(kMinPrefillChunk, step_token_limit - decode_tokens);

    // 1. Sequences already running: decodes (1 token) and unfinished prefill chunks.
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
        Sequence* s = running_[i];
        const bool prefill = s->num_uncomputed() > 1;
        const int n = std::min(s->num_uncomputed() + static_cast<int>(s->draft.tokens.size()),
                               prefill ? std::min({budget, prefill_left, chunk_cap(s)}) : budget);
        if (n <= 0) continue;
        const Evicted ev = evict(s, out);
        bool ok = true;
        while (!ensure_blocks(s, n, out)) {
            Sequence* victim = pick_victim();
            const bool self = victim == s;
            preempt(victim, out);
            if (self) {
                forget_eviction(ev, out);
                ok = false;
                break;
            }
        }
        if (!ok) break;
        // A draft that does not fit the budget is cut short, never the real tokens.
        const int n_draft = std::max(0, n - s->num_uncomputed());
        s->draft.cut(n_draft);
        emit(s, n, n_draft, out);
        budget -= n;
        if (prefill) prefill_left -= n;
    }

    // 2. Waiting sequences board while budget, sequence cap and blocks allow; not in a step
    // that had to preempt (memory is short: let the running ones finish first).
    if (config_.batching == EngineConfig::Batching::Static && running_.empty() &&
        !static_batch_open_ && !waiting_.empty()) {
        // Form the next static batch: when enough requests wait or the oldest waited enough.
        const auto oldest = std::min_element(
            waiting_.begin(), waiting_.end(),
            [](auto* a, auto* b) { return a->request->arrival_time < b->request->arrival_time; });
        const bool full = static_cast<int>(waiting_.size()) >= config_.max_num_seqs;
        const bool waited = now - (*oldest)->request->arrival_time >=
                            std::chrono::milliseconds(config_.batch_wait_ms);
        if (full || waited) {
            for (size_t i = 0; i < waiting_.size() && static_cast<int>(i) < config_.max_num_seqs;
                 ++i)
                waiting_[i]->batch_member = true;
            static_batch_open_ = true;
        }
    }
    const bool is_static = config_.batching == EngineConfig::Batching::Static;
    if (out.preempted == priority_preempted && admit_allowed()) {
        for (size_t i = 0; i < waiting_.size() && budget > 0 &&
                           static_cast<int>(running_.size()) < config_.max_num_seqs;) {
            Sequence* s = waiting_[i];
            if (is_static && !s->batch_member) {
                ++i;
                continue;
            }
            if (prefill_left <= 0) break;
            // A victim of this step's priority preemption does not board again at once (it
            // would take back the blocks it just gave up), nor does anyone behind it.
            if (s->request->params.priority >= boards_below_) break;
            const int hit = match_prefix(s);
            const int n = std::min({s->num_uncomputed(), budget, prefill_left, chunk_cap(s)});
            const Evicted ev = evict(s, out);  // a prefix-cache hit may outgrow the budget
            if (!ensure_blocks(s, n, out)) {
                forget_eviction(ev, out);
                release_blocks(s);
                s->num_computed = 0;
                break;
            }
            if (s->request->prompt.size() <= s->tokens.size() && s->output_len() == 0) {
                prefix_query_tokens_ += s->tokens.size();
                prefix_hit_tokens_ += hit;
                s->request->cached_tokens = std::max(s->request->cached_tokens, hit);
            }
            waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
            s->status = SeqStatus::Running;
            running_.push_back(s);
            emit(s, n, 0, out);
            budget -= n;
            prefill_left -= n;
        }
    }
    if (is_static && static_batch_open_ && running_.empty() &&
        std::none_of(waiting_.begin(), waiting_.end(), [](auto* s) { return s->batch_member; }))
        static_batch_open_ = false;
    return out;
}

void Scheduler::on_computed(Sequence* seq, int num_tokens) {
    seq->num_computed += num_tokens;
    blocks_.register_full(seq->kv, seq->tokens, seq->num_computed);
    if (window_blocks_)
        window_blocks_->register_full(seq->kv_window, seq->tokens, seq->num_computed);
    // The next token (position num_computed) attends back to num_computed - window + 1; a
    // rejected draft only ever rolls back to here.
    // Only the sliding layers' table gives blocks back where the global layers keep theirs.
    if (kv_window_ > 0) {
        BlockManager& manager = window_blocks_ ? *window_blocks_ : blocks_;
        BlockTable& table = window_blocks_ ? seq->kv_window : seq->kv;
        dropped_blocks_ += manager.drop_before(table, seq->num_computed - kv_window_ + 1);
    }
}

void Scheduler::trim_blocks(Sequence* seq) {
    if (config_.kv_layout == EngineConfig::KvLayout::Contiguous) return;  // reserved up front
    blocks_.trim(seq->kv, static_cast<int64_t>(seq->tokens.size()) - seq->kv.evicted);
    if (window_blocks_)
        window_blocks_->trim(seq->kv_window, static_cast<int64_t>(seq->tokens.size()));
}

void Scheduler::remove(Sequence* seq) {
    release_blocks(seq);
    by_id_.erase(seq->id);
    seq->status = SeqStatus::Finished;
    seq->batch_member = false;
    if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end())
        running_.erase(it);
    if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end())
        waiting_.erase(it);
    if (running_.empty() &&
        std::none_of(waiting_.begin(), waiting_.end(), [](auto* s) { return s->batch_member; }))
        static_batch_open_ = false;
}

double Scheduler::kv_waste_fraction() const {
    const int bs = config_.block_size;
    std::unordered_map<int32_t, int> filled;  // per held block, the most slots any holder uses
    for (const Sequence* s : running_)
        for (size_t j = s->kv.n_dropped; j < s->kv.blocks.size(); ++j) {
            const int f = static_cast<int>(
                std::clamp<int64_t>(s->cache_len() - static_cast<int64_t>(j) * bs, 0, bs));
            int& slot = filled[s->kv.blocks[j]];
            slot = std::max(slot, f);
        }
    if (filled.empty()) return 0.0;
    int64_t used = 0;
    for (auto& [b, f] : filled) used += f;
    const int64_t held = static_cast<int64_t>(filled.size()) * bs;
    return 1.0 - static_cast<double>(used) / static_cast<double>(held);
}

}  // namespace ferry::engine
