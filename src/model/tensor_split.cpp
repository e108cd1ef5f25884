#include "model/tensor_split.h"

#include <cstring>
#include <memory>

#include <fmt/format.h>

namespace ferry::model {

Range split_even(int64_t n, int parts, int index) {
    const int64_t base = n / parts, extra = n % parts;
    const int64_t begin = index * base + std::min<int64_t>(index, extra);
    return {begin, begin + base + (index < extra ? 1 : 0)};
}

namespace {

// Columns of a matrix of type t can be cut at multiples of this many elements; 0: not at all.
int64_t column_unit(DType t) {
    const DTypeInfo& info = dtype_info(t);
    return info.row_header ? 0 : info.block_size;
}

}  // namespace

Expected<TensorSplit> plan_split(const LlamaConfig& c, DType wo, DType down, int rank, int size) {
    TensorSplit s;
    s.rank = rank;
    s.size = size;
    if (c.n_head_kv < size)
        return make_error(
            "--tp {}: the model has {} KV head{}, fewer than the ranks; each rank needs at least "
            "one (use --tp {} or less)",
            size, c.n_head_kv, c.n_head_kv == 1 ? "" : "s", c.n_head_kv);
    s.kv_heads = split_even(c.n_head_kv, size, rank);
    const int64_t group = c.n_head / c.n_head_kv;
    const int64_t wo_unit = column_unit(wo), down_unit = column_unit(down);
    if (!wo_unit || !down_unit)
        return make_error(
            "--tp: a matrix of type {} cannot be cut by columns (its rows carry one "
            "scale); load the model as a GGUF block type (--weights q8_0)",
            dtype_name(wo_unit ? down : wo));
    // Every rank's attention-output columns must start and end on whole blocks.
    for (int r = 0; r <= size; ++r) {
        const int64_t at =
            (r == size ? c.n_head_kv : split_even(c.n_head_kv, size, r).begin) * group * c.head_dim;
        if (at % wo_unit)
            return make_error(
                "--tp {}: the attention output's columns ({} per KV head) do not split on its "
                "{}-element {} blocks",
                size, group * c.head_dim, wo_unit, dtype_name(wo));
    }
    // An MLP's hidden columns, shared out in whole blocks of `down`.
    const auto columns = [&](int64_t ff, const char* what) -> Expected<Range> {
        if (ff % down_unit)
            return make_error("--tp: the {}'s {} columns are not whole {}-element {} blocks", what,
                              ff, down_unit, dtype_name(down));
        if (ff / down_unit < size)
            return make_error("--tp {}: the {} has only {} {} blocks of columns to share", size,
                              what, ff / down_unit, dtype_name(down));
        const Range blocks = split_even(ff / down_unit, size, rank);
        return Range{blocks.begin * down_unit, blocks.end * down_unit};
    };
    auto ffn = columns(c.is_moe() ? c.n_ff_expert : c.n_ff, c.is_moe() ? "experts' MLP" : "MLP");
    if (!ffn) return ffn.error();
    s.ffn = *ffn;
    if (c.is_moe() && c.n_ff_shared > 0) {
        auto shared = columns(c.n_ff_shared, "shared expert");
        if (!shared) return shared.error();
        s.shared_ffn = *shared;
    }
    s.vocab = split_even(c.n_vocab, size, rank);
    for (int r = 0; r < size; ++r)
        s.vocab_rows.push_back(static_cast<int>(split_even(c.n_vocab, size, r).size()));
    return s;
}

Expected<Tensor> slice_columns(const Tensor& m, int64_t c0, int64_t c1) {
    const DTypeInfo& info = dtype_info(m.dtype());
    if (m.ndim() != 2 || info.row_header || c0 % info.block_size || c1 % info.block_size ||
        c0 < 0 || c1 > m.cols() || c0 >= c1)
        return make_error("columns [{}, {}) of a {} matrix of {} columns are not whole blocks", c0,
                          c1, dtype_name(m.dtype()), m.cols());
    const int64_t rows = m.rows(), n = c1 - c0;
    const size_t skip = row_bytes(info, c0), len = row_bytes(info, n);
    auto buf = std::make_shared<std::vector<std::byte>>(len * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
        std::memcpy(buf->data() + len * static_cast<size_t>(r),
                    static_cast<const std::byte*>(m.raw()) + m.stride(0) * r + skip, len);
    return Tensor(buf->data(), m.dtype(), {rows, n}).owned_by(buf);
}

Status check_pipeline(const LlamaConfig& c, int stages) {
    if (c.n_layer < stages)
        return make_error("--pp {}: the model has only {} layers to share", stages, c.n_layer);
    return Status::Ok();
}

}  // namespace ferry::model
