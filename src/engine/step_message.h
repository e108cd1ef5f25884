// What rank 0 sends the other ranks of a tensor-parallel group, as bytes: the KV cache's shape
// when a runner is made (Setup), then each forward pass's block copies and work (Step), which
// the ranks run as rank 0 does, and while idle that it is still there (Keepalive). Plain values
// only: token ids, positions, block ids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"
#include "quant/kv_format.h"

namespace ferry::engine {

struct StepSetup {
    int64_t n_blocks = 0;
    int32_t block_size = 0;
    quant::KvDType kv_dtype = quant::KvDType::F32;
    int64_t n_window_blocks = 0;  // a hybrid cache's window pool (kv::KvWindowPool)
    // int8 keys: the tokens of the calibration run just before, each rank's scales measured on
    // its own share of it (kv::KvFormat::calibration_tokens).
    int32_t calibration_tokens = 0;
};

struct StepWork {
    std::vector<int32_t> tokens;
    int64_t start_pos = 0;
    int64_t rope_offset = 0;
    std::vector<int32_t> blocks;
    std::vector<int32_t> window_blocks;
    int32_t n_logits = 0;
    std::vector<uint64_t> tree;  // a draft tree's masks (kernels::BatchSeq::tree), or empty
};

struct StepMessage {
    // Keepalive: rank 0 is idle but alive (a serving engine sends one a second while idle), so
    // a rank that hears nothing for longer than the timeout knows rank 0 is gone.
    enum class Kind : uint8_t { Setup = 1, Step = 2, Keepalive = 3 } kind = Kind::Step;
    StepSetup setup;
    std::vector<std::pair<int32_t, int32_t>> copies;         // block copies (src, dst), done first
    std::vector<std::pair<int32_t, int32_t>> window_copies;  // the same in the window pool
    std::vector<std::pair<int32_t, int64_t>> moves;  // keys (block, delta) moved, done second
    // A verified draft tree's accepted branch moving down (ModelRunner::move_slots): slot
    // slot_from[i] to slot_to[i] of one sequence's tables, done third.
    std::vector<int32_t> slot_table, slot_window_table;
    std::vector<int64_t> slot_from, slot_to;
    std::vector<StepWork> work;
};

// Appends the message's bytes to `out` (cleared first).
void encode_step(const StepMessage& m, std::vector<std::byte>& out);
// The message `bytes` hold; an error for a truncated or unknown one.
Expected<StepMessage> decode_step(std::span<const std::byte> bytes);

}  // namespace ferry::engine
