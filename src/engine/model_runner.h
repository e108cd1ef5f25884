// Turns a SchedulerOutput into one ragged forward pass: performs the listed block copies,
// packs every sequence's chunk (token ids, positions, block tables) and returns one row of
// logits per sequence that wants them, in the output's order. It decides nothing.
#pragma once

#include <vector>

#include "core/thread_pool.h"
#include "engine/scheduler.h"
#include "kv/kv_store.h"
#include "model/llama.h"

namespace ferry::engine {

class ModelRunner {
  public:
    ModelRunner(const model::LlamaModel& model, int n_threads, int64_t n_blocks, int block_size,
                kv::KvFormat kv = {});

    // Logits rows (n_vocab each) for the scheduled sequences with wants_logits, in order:
    // 1 + num_draft rows for each.
    const std::vector<float>& execute(const SchedulerOutput& out);
    int n_vocab() const { return model_.config().n_vocab; }
    ThreadPool& pool() { return pool_; }

  private:
    const model::LlamaModel& model_;
    ThreadPool pool_;
    kv::KvStore store_;
    std::vector<int32_t> tokens_;
    std::vector<model::LlamaModel::BatchSeq> seqs_;
    std::vector<float> logits_;
};

}  // namespace ferry::engine
