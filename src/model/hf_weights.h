// A Hugging Face directory's tensors as the model binds them (weight_file.h): the GGUF name
// the model asks for is mapped to the transformers one ("blk.3.attn_q.weight" ->
// "model.layers.3.self_attn.q_proj.weight"). Matrices keep transformers' [out, in] layout,
// which is already the model's {rows, cols}; q and k stay in its rotate-half order, so the
// model rotates them NeoX style (llama_config.h says so for a directory's config).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hf/model_dir.h"
#include "model/weight_file.h"

namespace ferry::model {

class HfWeights final : public WeightFile {
  public:
    explicit HfWeights(std::shared_ptr<const hf::ModelDir> dir) : dir_(std::move(dir)) {}

    const std::string& path() const override { return dir_->path(); }
    Expected<std::optional<Tensor>> find(const std::string& name) const override;
    std::string display_name(const std::string& name) const override;
    void release(const void* p, size_t n) const override { dir_->release(p, n); }
    int64_t parameter_count() const override;
    std::string tensor_past_layer(int n_layer) const override;
    std::map<std::string, TypeTotal> stored_types() const override;

    // The transformers names a GGUF tensor name may be stored under (Phi-3's fused gate_up is
    // GGUF's ffn_up as Llama's up_proj is), first the usual one; empty for none.
    static std::vector<std::string> hf_names(const std::string& gguf_name);
    static std::string hf_name(const std::string& gguf_name);
    // The directory's tensor for a GGUF name, whichever of its names it has; null for none.
    static const hf::SafeTensor* stored(const hf::ModelDir& dir, const std::string& gguf_name);

  private:
    std::shared_ptr<const hf::ModelDir> dir_;
};

}  // namespace ferry::model
