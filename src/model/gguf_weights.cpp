#include "model/gguf_weights.h"

namespace ferry::model {

Expected<std::optional<Tensor>> GgufWeights::find(const std::string& name) const {
    const gguf::TensorInfo* t = file_->tensor(name);
    if (!t) return std::optional<Tensor>();
    const DTypeInfo& info = dtype_info(t->type);
    if (!info.supported)
        return make_error("{}: tensor '{}' has type {}, which ferry cannot compute with",
                          file_->path(), name, info.name);
    // GGUF lists the contiguous dimension first: [cols, rows].
    if (t->shape.size() == 1) return std::optional<Tensor>(Tensor(t->data, t->type, {t->shape[0]}));
    if (t->shape.size() == 2 || t->shape.size() == 3) {
        if (t->shape[0] % info.block_size != 0)
            return make_error("{}: tensor '{}' has {} columns, not whole {} blocks of {}",
                              file_->path(), name, t->shape[0], info.name, info.block_size);
        if (t->shape.size() == 2)
            return std::optional<Tensor>(Tensor(t->data, t->type, {t->shape[1], t->shape[0]}));
        // A mixture's stacked experts: {n_expert, rows, cols}.
        return std::optional<Tensor>(
            Tensor(t->data, t->type, {t->shape[2], t->shape[1], t->shape[0]}));
    }
    return make_error("{}: tensor '{}' has {} dimensions", file_->path(), name, t->shape.size());
}

int64_t GgufWeights::parameter_count() const {
    int64_t n = 0;
    for (const auto& t : file_->tensors()) n += t.n_elements;
    return n;
}

std::string GgufWeights::tensor_past_layer(int n_layer) const {
    for (const auto& t : file_->tensors())
        if (layer_of(t.name, "blk.") >= n_layer) return t.name;
    return {};
}

std::map<std::string, WeightFile::TypeTotal> GgufWeights::stored_types() const {
    std::map<std::string, TypeTotal> out;
    for (const auto& t : file_->tensors()) {
        auto& e = out[std::string(dtype_name(t.type))];
        ++e.tensors;
        e.bytes += t.n_bytes;
    }
    return out;
}

}  // namespace ferry::model
