// A GGUF file's tensors as the model binds them (weight_file.h): GGUF's names are the model's.
#pragma once

#include <memory>

#include "gguf/gguf_file.h"
#include "model/weight_file.h"

namespace ferry::model {

class GgufWeights final : public WeightFile {
  public:
    explicit GgufWeights(std::shared_ptr<gguf::File> file) : file_(std::move(file)) {}

    const std::string& path() const override { return file_->path(); }
    Expected<std::optional<Tensor>> find(const std::string& name) const override;
    void release(const void* p, size_t n) const override { file_->release(p, n); }
    int64_t parameter_count() const override;
    std::string tensor_past_layer(int n_layer) const override;
    std::map<std::string, TypeTotal> stored_types() const override;

  private:
    std::shared_ptr<gguf::File> file_;
};

}  // namespace ferry::model
