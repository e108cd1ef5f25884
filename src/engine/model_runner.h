// The only door to the model. A runner owns the backend it runs on (shared with the model's
// other runners: one device, one thread pool), its KV store on that device, and the packing
// of a batch: every sequence's chunk becomes token ids, positions and block tables, one
// ragged forward pass runs, and the wanted logits come back in host memory. It decides
// nothing: the engine's scheduler, the single-stream generator, the draft model, the evaluator
// and both calibrations say what to run.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/scheduler_output.h"
#include "kernels/backend.h"
#include "kv/kv_store.h"
#include "model/llama.h"

namespace ferry::engine {

class ModelRunner {
  public:
    // A cache of n_blocks blocks of block_size positions, holding `kv`'s element type; with
    // n_window_blocks > 0, the model's sliding-window layers hold that many blocks of their own
    // instead (kv::KvWindowPool), which each work item's window_blocks index. For a model split
    // over a group (tensor parallelism), rank 0's runner is the group's: the other ranks make
    // the same cache (follow_steps) and run every forward pass it runs.
    ModelRunner(const model::LlamaModel& model, std::shared_ptr<kernels::Backend> backend,
                int64_t n_blocks, int block_size, kv::KvFormat kv = {},
                int64_t n_window_blocks = 0);

    // One sequence's work in a batch: `tokens` at positions start_pos.., into (and attending
    // over) `blocks`, with logits for the last n_logits of them (0..tokens.size()).
    struct Work {
        std::span<const int32_t> tokens;
        int64_t start_pos = 0;
        std::span<const int32_t> blocks;
        int n_logits = 1;
        int64_t rope_offset = 0;  // added to the positions for RoPE only (kernels::BatchSeq)
        // Sum the attention weights of the item's first attn_mass tokens per block
        // (attention_mass); 0: none.
        int attn_mass = 0;
        std::span<const int32_t> window_blocks = {};  // a hybrid cache's sliding layers' table
        // A draft tree verified in one pass (kernels::BatchSeq::tree), one mask per token;
        // empty: a chain.
        std::span<const uint64_t> tree = {};
    };
    // Runs the work as one forward pass and returns the logits rows (n_vocab each), work item
    // by work item; valid until the next call.
    std::span<const float> run(std::span<const Work> work);
    // An engine step: the block copies first, then the keys moved, then the scheduled
    // sequences, with 1 + num_draft logits rows for each that wants them.
    std::span<const float> execute(const SchedulerOutput& out);
    // Makes the next run() or execute() end in token ids rather than logits, for a step whose
    // every row wants only a token: the device picks them and only the ids cross to the host,
    // not rows x n_vocab floats (on a GPU, megabytes a step for a large vocabulary). With no
    // `rows`, each row's most likely token (Backend::argmax); else row i drawn as rows[i] asks
    // (Backend::sample; the arguments must outlive that call), -1 where its mask allows
    // nothing. That call then returns no logits, and picked() holds the ids in the rows' order
    // until the next call.
    void pick_next(std::span<const kernels::SampleRow> rows = {},
                   std::span<const kernels::LogitEdit> edits = {},
                   std::span<const uint64_t> masks = {});
    std::span<const int32_t> picked() const { return ids_; }
    // Disarms pick_next() when the step it was for will not run (the caller threw first).
    void cancel_pick();
    // Copies the keys and values of slot `from` to slot `to` of a sequence's table (and its
    // window table), every layer, pair by pair: a verified tree's accepted branch moving down
    // to the slots its positions own (kernels::Backend::kv_move_slots).
    void move_slots(std::span<const int32_t> blocks, std::span<const int32_t> window_blocks,
                    std::span<const std::pair<int64_t, int64_t>> moves);

    // After a run: work item i's attention mass per block (its table's blocks, in order): the
    // softmax weights its tokens gave each block, summed over them, this rank's query heads and
    // the layers (H2O eviction's scores). Empty unless the item asked for it.
    std::span<const float> attention_mass(size_t i) const;

    // Rank 0 of a group, idle: tells the other ranks it is alive when it has sent them nothing
    // for `every` (they stop waiting for it once they have heard nothing for the timeout). Throws
    // comm::CommError when the group fails.
    void keep_group_alive(std::chrono::steady_clock::duration every);

    // A rank other than 0 of the group `model` is split over: runs what rank 0's runner runs,
    // step by step, until rank 0 ends the group (Ok) or the group fails (its error).
    static Status follow_steps(const model::LlamaModel& model,
                               std::shared_ptr<kernels::Backend> backend);

    // Every later run shows `o` (not owned; null to stop) the inputs of the linear maps.
    void set_observer(model::ActivationObserver* o) { observer_ = o; }
    // Every later run keeps the output head's input (the final hidden state) of each logits
    // row: Medusa drafts from it.
    void set_keep_hidden(bool on) { keep_hidden_ = on; }
    // After a run with keep_hidden: n_embd floats per logits row, in the logits' order.
    std::span<const float> hidden() const { return hidden_; }
    // Logits row `row`'s hidden state; empty when the run kept none for it.
    std::span<const float> hidden_row(size_t row) const {
        const auto d = static_cast<size_t>(model_.config().n_embd);
        return (row + 1) * d <= hidden_.size() ? std::span<const float>(hidden_).subspan(row * d, d)
                                               : std::span<const float>{};
    }

    const model::LlamaModel& model() const { return model_; }
    int n_vocab() const { return model_.config().n_vocab; }
    kernels::Backend& backend() { return *backend_; }
    const std::shared_ptr<kernels::Backend>& backend_ptr() const { return backend_; }
    kv::KvStore& kv() { return store_; }
    const kv::KvStore& kv() const { return store_; }

  private:
    // The block copies, the keys moved, then the work as one forward pass; rank 0 of a group
    // sends all three first.
    using Copies = std::span<const std::pair<int32_t, int32_t>>;
    // Every op of it has run when it returns or throws (Backend::synchronize).
    std::span<const float> step(Copies copies, Copies window_copies,
                                std::span<const std::pair<int32_t, int64_t>> moves,
                                std::span<const Work> work);
    std::span<const float> run_step(Copies copies, Copies window_copies,
                                    std::span<const std::pair<int32_t, int64_t>> moves,
                                    std::span<const Work> work);
    bool leads_group() const;
    // The packed batch of these work items (the first of them item `first` of the step).
    void pack(std::span<const Work> work, size_t first_item);

    const model::LlamaModel& model_;
    std::shared_ptr<kernels::Backend> backend_;
    int calibration_tokens_;  // sent in the Setup message (kv::KvFormat::calibration_tokens)
    kv::KvStore store_;
    model::ActivationObserver* observer_ = nullptr;
    // What a pass shows: observer_'s calls, and with keep_hidden_ the head's input into hidden_.
    struct Tap final : model::ActivationObserver {
        ModelRunner* r;
        explicit Tap(ModelRunner* runner) : r(runner) {}
        void observe(int layer, model::LinearInput which, const Tensor& rows) override {
            if (r->observer_) r->observer_->observe(layer, which, rows);
        }
        int last_layer() const override { return r->observer_ ? r->observer_->last_layer() : -1; }
        void observe_head(const Tensor& rows) override;
    };
    Tap tap_{this};
    bool keep_hidden_ = false;
    std::vector<float> hidden_;
    // The packed batch, kept between runs so a step allocates nothing.
    std::vector<int32_t> tokens_, token_seq_, logit_tokens_;
    std::vector<int64_t> positions_;
    std::vector<kernels::BatchSeq> seqs_;
    std::vector<Work> work_;
    struct Group {           // one micro-batch of a pipeline
        size_t begin, end;   // work items [begin, end)
        int64_t row0, rows;  // its logits rows
    };
    std::vector<Group> groups_;
    // Attention mass: per item its offset into mass_ (n_head x blocks floats, summed into
    // mass_sum_ at its blocks' offset after the step), or kNoMass.
    static constexpr size_t kNoMass = static_cast<size_t>(-1);
    std::vector<size_t> mass_at_, mass_sum_at_, mass_blocks_;
    std::vector<float> mass_, mass_sum_;
    std::vector<std::pair<int32_t, int32_t>> copies_, window_copies_;
    std::vector<std::pair<int32_t, int64_t>> moves_;
    Tensor logits_;  // on the device, grown to the largest step
    // Set: the next step's rows end in ids (pick_next), drawn as rows asks, argmax if empty.
    struct Pick {
        std::span<const kernels::SampleRow> rows;
        std::span<const kernels::LogitEdit> edits;
        std::span<const uint64_t> masks;
    };
    std::optional<Pick> pick_;
    std::vector<int32_t> ids_;
    std::vector<std::byte> message_;  // the step as sent to the group
    std::chrono::steady_clock::time_point last_sent_{};
};

}  // namespace ferry::engine
