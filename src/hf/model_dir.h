// A Hugging Face model directory as `--model` takes it: config.json, the weights in one
// model.safetensors or in shards listed by model.safetensors.index.json, and the optional
// generation_config.json, tokenizer.json and tokenizer_config.json. Every shard is opened
// and validated up front, and every tensor the index names must be in its shard.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "hf/safetensors.h"

namespace ferry::hf {

// Whether `path` is a directory holding a config.json (what `-m` treats as a HF directory).
bool is_model_dir(const std::string& path);

class ModelDir {
  public:
    static Expected<std::unique_ptr<ModelDir>> open(const std::string& dir);

    const std::string& path() const { return dir_; }
    const nlohmann::json& config() const { return config_; }
    // generation_config.json / tokenizer_config.json, or null when the directory has none.
    const nlohmann::json& generation_config() const { return generation_; }
    const nlohmann::json& tokenizer_config() const { return tokenizer_config_; }
    // Where tokenizer.json is; empty when absent.
    const std::string& tokenizer_json_path() const { return tokenizer_json_; }
    // The chat template's Jinja source, looked up where transformers looks: chat_template.jinja,
    // then chat_template.json, then tokenizer_config.json's "chat_template" (a string, or a list
    // of named templates of which "default" is taken). Empty when the directory has none.
    Expected<std::string> chat_template() const;
    // A special token's text as tokenizer_config.json gives it (a string, or an AddedToken
    // object's "content"); empty when absent.
    std::string special_token_text(const std::string& key) const;
    // generation_config.json's eos_token_id (a number or a list); empty when absent.
    std::vector<int32_t> eos_token_ids() const;

    const SafeTensor* tensor(std::string_view name) const;
    // Every tensor of every shard, shard by shard.
    std::vector<const SafeTensor*> tensors() const;
    const std::vector<std::shared_ptr<SafetensorsFile>>& shards() const { return shards_; }
    // As gguf::File::release, for bytes in any shard.
    void release(const void* p, size_t n) const;

  private:
    ModelDir() = default;
    std::string dir_;
    nlohmann::json config_, generation_, tokenizer_config_;
    std::string tokenizer_json_;
    std::vector<std::shared_ptr<SafetensorsFile>> shards_;
};

}  // namespace ferry::hf
