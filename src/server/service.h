// What the HTTP layer needs from a model and an engine, as one narrow interface. The real one
// (EngineService, built by `ferry serve`) wraps engine::Engine and the loaded model; unit tests
// plug in a scripted fake, so the HTTP layer is tested without a model.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/constraint.h"
#include "engine/metrics.h"
#include "engine/request.h"
#include "tokenizer/chat_template.h"

namespace ferry::server {

class Service {
  public:
    virtual ~Service() = default;

    virtual Expected<engine::RequestId> add_request(std::vector<int32_t> prompt,
                                                    engine::RequestParams params,
                                                    engine::TokenCallback on_token) = 0;
    virtual void abort(engine::RequestId id) = 0;
    virtual void abort_all() = 0;
    virtual engine::EngineMetrics metrics() const = 0;
    // Why the engine cannot serve at all (a parallel group that failed), if it cannot.
    virtual std::optional<std::string> failure() const { return std::nullopt; }

    virtual int max_model_len() const = 0;
    // Streaming KV eviction keeps each sequence's cache within a budget and its positions
    // within the cache (engine/kv_eviction.h): a prompt and its output may then run past
    // max_model_len.
    virtual bool runs_past_context() const { return false; }
    virtual int n_vocab() const = 0;
    virtual std::vector<int32_t> encode(std::string_view text, bool add_special) const = 0;
    virtual std::string decode(std::span<const int32_t> ids) const = 0;
    virtual std::string token_piece(int32_t id) const = 0;  // raw bytes, for logprobs
    // The conversation rendered through the model's chat template, or why it cannot be.
    // `tools`: an OpenAI tools list for templates that render one (null: none); `extra`:
    // more template variables (an object, or null); `add_generation_prompt`: open the
    // assistant's turn at the end (false: the conversation as it stands).
    virtual Expected<std::string> apply_chat(const std::vector<tokenizer::ChatMessage>& msgs,
                                             const nlohmann::ordered_json& tools,
                                             const nlohmann::ordered_json& extra,
                                             bool add_generation_prompt = true) const = 0;
    // A fill-in-the-middle prompt: the model's prefix / suffix / middle tokens around
    // `prefix` (ids without BOS) and `suffix`, or why the model cannot (tokenizer/fim.h).
    virtual Expected<std::vector<int32_t>> fill_in_middle(const std::vector<int32_t>& prefix,
                                                          std::string_view suffix) const {
        (void)prefix, (void)suffix;
        return make_error("fill-in-the-middle is not available on this server");
    }
    // The chat template's Jinja text (empty when there is none).
    virtual std::string chat_template_source() const { return {}; }
    // A request's output constraint compiled against the served vocabulary (cached by
    // constraint), or why it cannot be honoured.
    virtual Expected<std::shared_ptr<const grammar::CompiledGrammar>> compile_constraint(
        const engine::Constraint&) const {
        return make_error("structured outputs are not available on this server");
    }
    // The sampling a request gets for every field it leaves out: OpenAI's (plain sampling at
    // temperature 1), with what the model's generation_config.json sets on top, as vLLM does.
    virtual engine::SamplingParams default_sampling() const {
        engine::SamplingParams s;
        s.temperature = 1.0f;
        s.top_k = 0;
        s.top_p = 1.0f;
        s.min_p = 0.0f;
        s.repetition_penalty = 1.0f;
        s.penalty_last_n = -1;
        return s;
    }
};

}  // namespace ferry::server
