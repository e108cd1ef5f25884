// The tensors of a checkpoint, by the names GGUF gives them ("blk.3.attn_q.weight"), whatever
// file holds them: a GGUF file, or a Hugging Face directory of safetensors shards. The model
// binds through this, so it is written once for every format.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "core/tensor.h"

namespace ferry::model {

class WeightFile {
  public:
    virtual ~WeightFile() = default;

    // Where it came from, for messages.
    virtual const std::string& path() const = 0;
    // The tensor GGUF names `name`, as a host view into the file: {rows, cols} for a matrix
    // (rows = output channels), {n} for a vector, {n_expert, rows, cols} for a mixture's stacked
    // experts. nullopt when the checkpoint has none; an
    // error for one in a type ferry cannot read, or of a rank it cannot be.
    virtual Expected<std::optional<Tensor>> find(const std::string& name) const = 0;
    // `name` as messages should say it: the checkpoint's own name for the tensor (a directory's
    // transformers name, with GGUF's after it), else the GGUF name itself.
    virtual std::string display_name(const std::string& name) const { return name; }
    // The file's pages under [p, p + n) are not needed for now (a resident copy serves them).
    virtual void release(const void* p, size_t n) const = 0;
    // Elements of every tensor in the checkpoint.
    virtual int64_t parameter_count() const = 0;
    // The checkpoint's own name of a tensor in a layer numbered n_layer or more ("blk.N.*",
    // "model.layers.N.*"); empty when every layer tensor is below it.
    virtual std::string tensor_past_layer(int n_layer) const = 0;

    struct TypeTotal {
        int tensors = 0;
        size_t bytes = 0;
    };
    // What the checkpoint stores, by type name in lower case ("q4_1", "bf16"): tensors, bytes.
    virtual std::map<std::string, TypeTotal> stored_types() const = 0;
};

// N of a tensor named `prefix` N "." ...; -1 for any other name.
inline int64_t layer_of(std::string_view name, std::string_view prefix) {
    if (!name.starts_with(prefix)) return -1;
    name.remove_prefix(prefix.size());
    const size_t dot = name.find('.');
    if (dot == 0 || dot == std::string_view::npos || dot > 9) return -1;
    int64_t n = 0;
    for (char ch : name.substr(0, dot)) {
        if (ch < '0' || ch > '9') return -1;
        n = n * 10 + (ch - '0');
    }
    return n;
}

}  // namespace ferry::model
