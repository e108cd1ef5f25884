// Attention of query vectors over a sequence's keys and values scattered over KV blocks.
//
// Every query's result is a fixed function of its own inputs: it does not depend on how the
// positions are split into blocks (the engine uses 16-position blocks, the single-stream
// Generator 256), nor on which other queries are computed with it (other heads of its GQA
// group, other tokens of its sequence, other sequences of the batch). The engine's tests compare
// outputs across block sizes and batch compositions bit for bit, and that rests on this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "quant/kv_format.h"

namespace ferry::kernels::cpu {

// Keys and values may be stored as f32, f16, int8 or fp8 (quant/kv_format.h: element layout, and
// where a block's per-token scales sit); the kernels convert them in registers, so a narrower
// type reads fewer bytes and writes no float copy anywhere.
struct PagedKvView {
    const void* const* k_blocks;  // per block: this head's rows of block_size positions, and
    const void* const* v_blocks;  // the block's per-token scales (when the type has them)
    int block_size;
    size_t stride;        // elements between consecutive positions' rows of this head
    size_t head_offset;   // elements from a block's start to this head's row of its slot 0
    size_t scale_offset;  // bytes from a block's start to its per-token scales
    quant::KvDType dtype = quant::KvDType::F32;
    int scales_per_pos = 1;                  // per-token scales per position (KV heads)
    int scale_index = 0;                     // this KV head's among them
    const float* k_channel_scale = nullptr;  // int8 keys: head_dim per-channel scales
};

// The scalar reference: out = softmax(q·K[kv_start..n_kv) * scale) · V[kv_start..n_kv), with
// a streaming softmax over positions, each key and value row dequantized to floats first; q,
// out: head_dim floats; mass (may be null), tree_start and tree_mask as AttnRow's. What the SIMD
// paths are tested against.
void attend_paged_reference(const float* q, const PagedKvView& kv, int64_t n_kv, int head_dim,
                            float scale, float* out, int64_t kv_start = 0, float* mass = nullptr,
                            int64_t tree_start = -1, uint64_t tree_mask = 0);

// One query row: it attends to positions [kv_start, n_kv) of the view it is computed with
// (kv_start > 0: a sliding window). No path reads a position before the smallest kv_start of
// the rows it computes together, so blocks out of every row's window may be gone.
struct AttnRow {
    const float* q;  // head_dim floats
    float* out;      // head_dim floats
    int64_t n_kv;
    int64_t kv_start = 0;
    // Where set: each position's softmax weight is added to its block's entry (the view's
    // blocks, in order), the attention mass H2O eviction ranks blocks by. Every path adds the
    // same weights; only their summation order differs.
    float* mass = nullptr;
    // A tree of draft tokens verified in one pass (engine/speculation.h): of the positions
    // [tree_start, n_kv), the row sees only those whose bit p - tree_start of tree_mask is set
    // (its own token and its ancestors). tree_start < 0: it sees every position in range.
    int64_t tree_start = -1;
    uint64_t tree_mask = 0;
};

// Several query rows over the same KV head, at the dispatched CPU level: each key and value
// row is read once for all of them (GQA heads of one group, consecutive tokens of one
// sequence). Every position < max n_kv of the rows must be readable.
void attend_paged_rows(std::span<const AttnRow> rows, const PagedKvView& kv, int head_dim,
                       float scale);

// One query: attend_paged_rows with a single row.
void attend_paged(const float* q, const PagedKvView& kv, int64_t n_kv, int head_dim, float scale,
                  float* out);

// A sequence's block addresses in the current layer.
struct SeqBlocks {
    const void* const* k;
    const void* const* v;
    // Where set: n_tokens x n_head x n_blocks floats each of the sequence's tokens in the batch
    // adds its attention weights to, head by head (AttnRow::mass); each (token, head) its own
    // row, so threads never share an entry.
    float* mass = nullptr;
    int64_t n_blocks = 0;
    // Where set: the sequence verifies a tree of drafts (kernels::BatchSeq::tree), one mask per
    // token of the batch from first_token on, over positions from tree_start.
    const uint64_t* tree = nullptr;
    int64_t first_token = 0;
    int64_t tree_start = 0;
};

// Causal attention for a whole ragged batch: token t (of sequence tok_seq[t], at position
// tok_pos[t]) attends to positions [0, tok_pos[t]] of its sequence with each of its n_head
// query heads (a tree sequence's tokens to their ancestors among those). Keys and values of
// every token of the batch must already be in the blocks.
struct AttentionBatch {
    const float* q;  // n_tokens x n_head x head_dim
    float* out;      // n_tokens x n_head x head_dim
    int64_t n_tokens;
    int n_head;
    int n_head_kv;
    int head_dim;
    float scale;
    const int32_t* tok_seq;
    const int64_t* tok_pos;
    std::span<const SeqBlocks> seqs;
    int block_size;
    quant::KvBlockLayout layout;  // the blocks' (KvStore::layout())
    quant::KvDType dtype = quant::KvDType::F32;
    const float* k_channel_scales = nullptr;  // int8 keys: n_head_kv * head_dim, this layer's
    int window = 0;  // > 0: the token at pos sees (pos - window, pos] only (a sliding window)
    // With a window: per token, the position the window ends at (a tree token's slot is past
    // its position); null: tok_pos.
    const int64_t* window_pos = nullptr;
};
void attend_batch(const AttentionBatch& b, ThreadPool& pool);

}  // namespace ferry::kernels::cpu
