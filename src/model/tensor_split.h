// A rank's share of a model under tensor parallelism, Megatron's split: each rank holds some of
// the KV heads (with their groups' query heads and those heads' columns of the attention
// output), some of the MLP's hidden columns (gate / up rows, down columns) and some of the
// output head's vocabulary rows. Attention output and MLP down are then partial sums that one
// sum over the ranks completes, and the logits are the ranks' slices side by side. The token
// embedding is looked up a row per token, so every rank keeps all of it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/llama_config.h"

namespace ferry::model {

struct Range {
    int64_t begin = 0, end = 0;
    int64_t size() const { return end - begin; }
};

// n units over `parts` ranks as evenly as possible, the first n % parts ranks one more.
Range split_even(int64_t n, int parts, int index);

struct TensorSplit {
    int rank = 0, size = 1;
    Range kv_heads;               // this rank's KV heads; its query heads are their groups
    Range ffn;                    // the MLP's hidden columns (a mixture's: each expert's)
    Range shared_ffn;             // a mixture's shared expert's hidden columns
    Range vocab;                  // the output head's rows
    std::vector<int> vocab_rows;  // every rank's vocab.size(), for gathering the logits
};

// The split of a model of config `c` whose attention output and MLP down matrices are of types
// wo / down (their columns are cut, so only at whole blocks), or an error that says why this
// model cannot be split `size` ways. A mixture's experts are split as a dense MLP is, each
// expert's hidden columns over the ranks (down: the experts' type), so every rank runs every
// expert's share and the router's choices need no exchange.
Expected<TensorSplit> plan_split(const LlamaConfig& c, DType wo, DType down, int rank, int size);

// Whether the layers of a model of config `c` can be shared over `stages` pipeline stages
// (each needs one at least).
Status check_pipeline(const LlamaConfig& c, int stages);

// Columns [c0, c1) of every row of the {rows, cols} matrix m, as a new tensor that owns its
// memory; both ends must fall on m's blocks.
Expected<Tensor> slice_columns(const Tensor& m, int64_t c0, int64_t c1);

}  // namespace ferry::model
