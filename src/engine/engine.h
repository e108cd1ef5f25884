// The serving engine: many requests share one model. Each step the scheduler picks which
// sequences run and how many tokens each (a plain SchedulerOutput), the model runner packs
// them into one ragged batch over the paged KV cache, the sampler extends each sequence, and
// tokens stream back through each request's callback. Requests board and leave at token
// granularity (continuous batching); `--batching static` and `--kv contiguous` are kept as
// baselines so the gain is measured.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/engine_config.h"
#include "engine/loaded_model.h"
#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/spec_planner.h"
#include "engine/speculation.h"

namespace ferry::engine {

class Scheduler;
class ModelRunner;
class Proposer;
struct Request;
struct ScheduledSeq;
struct SchedulerOutput;
struct Sequence;

class Engine {
  public:
    // Fails only when the speculation configuration cannot work: a draft model with another
    // vocabulary, or none at all.
    static Expected<std::unique_ptr<Engine>> create(const LoadedModel& model, EngineConfig config);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Queues a request. Fails (without side effects) when the prompt is empty, longer than
    // the model length allows, has a token outside the vocabulary, the parameters are out of
    // range (ErrorCode::Invalid), the waiting queue is full (ErrorCode::Unavailable), or the
    // engine cannot serve at all (ErrorCode::Down, failure()).
    // Why the engine cannot serve at all (its parallel group failed), if so; any thread.
    std::optional<std::string> failure() const;
    Expected<RequestId> add_request(std::vector<int32_t> prompt, RequestParams params,
                                    TokenCallback on_token);
    // Stops a request wherever it is; its callback gets a final event with reason Abort and
    // its KV blocks are freed before the next step. Safe from any thread; unknown ids ignored.
    void abort(RequestId id);

    // Runs one scheduler step (when not running its own thread). Returns whether a forward
    // pass ran (false when idle, or when a static batch is still waiting to form).
    bool step();
    bool has_work() const;

    // A dedicated engine thread for servers: steps while there is work, sleeps otherwise.
    void start();
    void stop();  // aborts nothing by itself: call abort_all() first for a hard stop
    void abort_all();

    EngineMetrics metrics() const;
    // Per-request metrics for requests finished since the last call (benchmarks use this).
    std::vector<RequestMetrics> take_finished_metrics();

    const EngineConfig& config() const { return config_; }
    int max_model_len() const { return max_model_len_; }
    // The context before the KV pool capped it (max_model_len() then is the pool's tokens);
    // 0 when the pool holds the whole context.
    int context_before_kv_cap() const { return context_before_kv_cap_; }
    const LoadedModel& model() const { return model_; }

    // KV pool geometry actually used (after sizing from kv_cache_memory).
    int64_t kv_blocks() const { return n_blocks_; }
    // Scales included: the real bytes. With a window pool, those of the global layers' pool: a
    // block of context past the window.
    size_t kv_bytes_per_block() const;
    int64_t kv_window_blocks() const { return n_window_blocks_; }  // 0: no window pool
    size_t kv_window_bytes_per_block() const;
    size_t kv_bytes_per_token() const { return kv_bytes_per_block() / config_.block_size; }

  private:
    Engine(const LoadedModel& model, EngineConfig config);
    // The pool's bytes when the config does not fix them (engine/kv_pool_size.h); on a GPU
    // that cannot hold a step's cache, one block and the reason in pool_error_.
    int64_t default_pool_bytes();
    // --kv-eviction's rules (kv_eviction.h) and the engine's own: the paged layout, no draft
    // model; the budget and a step within `context` positions.
    static Status check_eviction(const LoadedModel& model, const EngineConfig& config,
                                 int64_t context, const char* context_name);
    // What counts against the context: every token, or under streaming eviction (which runs
    // past it) the positions its cache holds.
    int64_t context_len(const Sequence& s) const;
    Status attach_draft();  // the draft model's proposer, sized to this engine's pool
    // How a step's tokens are picked: from the logits on the host, by the device's argmax
    // (every row plain greedy, no grammar), or by the device's draw (config's sample_on; every
    // row wants only a token: no logprobs, draft, or n > 1 still to fork; a grammar's allowed
    // tokens go with it as a mask).
    enum class PickPath { Logits, Argmax, Draw };
    PickPath pick_path(const SchedulerOutput& out, std::span<Sequence* const> seqs) const;
    // A Draw step's arguments into pick_rows_, pick_edits_ and pick_masks_; false (no
    // generator moved) when a grammar's mask failed, and the step reads logits instead.
    bool prepare_draws(const SchedulerOutput& out, std::span<Sequence* const> seqs);
    Status attach_medusa();  // the Medusa heads' proposer, when --medusa-heads names a file
    struct Live;
    void loop();
    void drain_inbox();
    void fork(Request& req, Sequence& parent, std::vector<Sequence*>& out);
    void propose_drafts();
    void fit_draft(Sequence& seq);
    // first_row: the step's logits row of the draft's first position (Medusa reads the hidden
    // state of the row that gave the last token kept).
    void verify_and_emit(Sequence& seq, const float* logits, size_t first_row);
    void record_prompt_logprobs(Request& r, const ScheduledSeq& s, const float* rows);
    void emit(Sequence& seq, int32_t tok, const float* logits);
    void start_grammar_at_trigger(Sequence& seq, int32_t tok);
    void finish(Sequence& seq, FinishReason reason, TokenEvent* last);
    // Fault isolation: what one request's processing throws ends that request, not the engine.
    void deliver(Request& r, const TokenEvent& ev);
    void fail(Request& r, std::string what);
    void fail_pending();
    void abort_now(RequestId id);
    // The scheduler's step token limit under --max-tpot-ms (0: none yet, or no target): the
    // tokens a step can carry within the running requests' TPOT slack, by the measured costs.
    int step_token_limit(std::chrono::steady_clock::time_point now) const;
    void retire_finished();
    void publish_metrics();
    size_t kv_bytes_per_block_of(int n_layers) const;
    int rank_window_layers() const;  // this rank's sliding-window layers
    int window_layers() const;       // those in the window pool (0: no pool)

    const LoadedModel& model_;
    EngineConfig config_;
    int max_model_len_ = 0;
    int tree_window_ = 0;  // the model's smallest sliding window, which a draft tree must fit
    int context_before_kv_cap_ = 0;
    std::string pool_error_;  // create() refuses the engine with it
    int64_t n_blocks_ = 0;
    int64_t n_window_blocks_ = 0;  // the sliding layers' own pool (EngineConfig::kv_window_pool)
    std::unique_ptr<Scheduler> scheduler_;
    std::unique_ptr<ModelRunner> runner_;
    std::unique_ptr<Proposer> ngram_, lookahead_, draft_, medusa_;
    SpecPlanner planner_;  // step costs and acceptance, for the cost policy

    // Owned by the engine thread (or whoever calls step()).
    std::unordered_map<RequestId, std::unique_ptr<Live>> live_;
    std::vector<RequestId> done_;
    std::vector<std::pair<RequestId, std::string>> failed_;  // callbacks that threw
    uint64_t next_arrival_ = 0;
    uint64_t next_seq_ = 0;
    std::vector<kernels::SampleRow> pick_rows_;  // a Draw step's rows and edits (pick_path)
    std::vector<kernels::LogitEdit> pick_edits_;
    std::vector<uint64_t> pick_masks_;

    // The inbox: what other threads hand to the engine thread.
    mutable std::mutex inbox_mu_;
    std::vector<std::unique_ptr<Live>> pending_adds_;
    std::vector<RequestId> pending_aborts_;
    bool abort_all_ = false;  // every request, at the next drain
    std::atomic<RequestId> next_id_{1};
    std::atomic<int> queued_{0};  // waiting + pending, for the queue bound
    std::atomic<int> active_{0};  // requests not yet finished
    std::condition_variable cv_;

    mutable std::mutex metrics_mu_;
    EngineMetrics metrics_;
    std::vector<RequestMetrics> finished_metrics_;

    std::thread thread_;
    std::atomic<bool> stopping_{false};
};

}  // namespace ferry::engine
